{{/*
The objects come from files/generated/kustomize.json (charts/generate.py: what `kubectl kustomize`
renders from deploy/); these helpers apply the values to them. Names are fixed, as in deploy/: one
release per cluster (its ClusterRoles, admission policy and NodeFeatureRule are cluster-wide, and
the admission policy matches the ServiceAccount hetero-exporter by name).
*/}}

{{- define "hetero-exporter.generated" -}}
{{- $text := .Files.Get "files/generated/kustomize.json" -}}
{{- $doc := $text | fromJson -}}
{{- if or (not $doc) (hasKey $doc "Error") -}}
{{- fail (printf "files/generated/kustomize.json: %v (run python collectors/generate.py)" (dig "Error" "missing" $doc)) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* Helm's recommended labels, and the user's commonLabels. */}}
{{- define "hetero-exporter.labels" -}}
{{- $labels := dict "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_")
      "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/instance" .Release.Name
      "app.kubernetes.io/version" .Chart.AppVersion -}}
{{- toJson (merge $labels (deepCopy .Values.commonLabels)) -}}
{{- end -}}

{{- define "hetero-exporter.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The agent's config file, as the ConfigMap holds it and the pods' checksum reads it. */}}
{{- define "hetero-exporter.config" -}}
{{- toYaml .Values.config -}}
{{- end -}}

{{/*
One object out: the release namespace on namespaced objects and on deploy/'s ServiceAccount
subjects, none on cluster-scoped ones (kustomize puts one on the kinds it does not know:
NodeFeatureRule, ValidatingAdmissionPolicy up to kustomize v5.5); Helm's labels and commonLabels
added, the object's own winning. (dict "obj" OBJ "ctx" $ ["namespace" another namespace])
*/}}
{{- define "hetero-exporter.emit" -}}
{{- $o := .obj -}}
{{- $ctx := .ctx -}}
{{- $cluster := list "Namespace" "ClusterRole" "ClusterRoleBinding" "ValidatingAdmissionPolicy" "ValidatingAdmissionPolicyBinding" "NodeFeatureRule" -}}
{{- $meta := $o.metadata -}}
{{- if has $o.kind $cluster -}}
{{- $_ := unset $meta "namespace" -}}
{{- else -}}
{{- $_ := set $meta "namespace" (.namespace | default $ctx.Release.Namespace) -}}
{{- end -}}
{{- range ($o.subjects | default list) -}}
{{- if and (eq .kind "ServiceAccount") (eq (.namespace | default "") "hetero-exporter") -}}
{{- $_ := set . "namespace" $ctx.Release.Namespace -}}
{{- end -}}
{{- end -}}
{{- $_ := set $meta "labels" (merge ($meta.labels | default dict) (include "hetero-exporter.labels" $ctx | fromJson)) -}}
---
{{ toYaml $o }}
{{ end -}}

{{/* Pod template labels and annotations: Helm's labels and commonLabels, podAnnotations. (dict "pod" TEMPLATE "ctx" $) */}}
{{- define "hetero-exporter.podMeta" -}}
{{- $meta := .pod.metadata -}}
{{- $_ := set $meta "labels" (merge ($meta.labels | default dict) (include "hetero-exporter.labels" .ctx | fromJson)) -}}
{{- $annotations := merge ($meta.annotations | default dict) (deepCopy .ctx.Values.podAnnotations) -}}
{{- if $annotations -}}{{- $_ := set $meta "annotations" $annotations -}}{{- end -}}
{{- end -}}

{{/*
An agent DaemonSet with the values applied. (dict "ds" DAEMONSET "name" AGENT "ctx" $)
*/}}
{{- define "hetero-exporter.agent" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $ds := .ds -}}
{{- $agent := index $v.agents .name -}}
{{- $pod := $ds.spec.template.spec -}}
{{- $c := index $pod.containers 0 -}}
{{- $_ := set $c "image" (include "hetero-exporter.image" $ctx) -}}
{{- with $v.image.pullPolicy -}}{{- $_ := set $c "imagePullPolicy" . -}}{{- end -}}
{{- with $v.imagePullSecrets -}}{{- $_ := set $pod "imagePullSecrets" . -}}{{- end -}}
{{- with ($agent.resources | default $v.resources) -}}{{- $_ := set $c "resources" . -}}{{- end -}}
{{- with $v.tolerations -}}{{- $_ := set $pod "tolerations" . -}}{{- end -}}
{{- with $v.nodeSelector -}}{{- $_ := set $pod "nodeSelector" . -}}{{- end -}}
{{- with $v.priorityClassName -}}{{- $_ := set $pod "priorityClassName" . -}}{{- end -}}
{{- $affinity := $pod.affinity -}}
{{- with $v.affinity -}}
  {{- with .nodeAffinity -}}
    {{- with .requiredDuringSchedulingIgnoredDuringExecution -}}
      {{- $narrow := (index .nodeSelectorTerms 0).matchExpressions -}}
      {{- range $affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms -}}
        {{- $_ := set . "matchExpressions" (concat .matchExpressions $narrow) -}}
      {{- end -}}
    {{- end -}}
    {{- with .preferredDuringSchedulingIgnoredDuringExecution -}}
      {{- $_ := set $affinity.nodeAffinity "preferredDuringSchedulingIgnoredDuringExecution" . -}}
    {{- end -}}
  {{- end -}}
  {{- with .podAffinity -}}{{- $_ := set $affinity "podAffinity" . -}}{{- end -}}
  {{- with .podAntiAffinity -}}{{- $_ := set $affinity "podAntiAffinity" . -}}{{- end -}}
{{- end -}}
{{- range $pod.volumes -}}
  {{- if and .configMap (hasPrefix "hetero-exporter-config-" .configMap.name) -}}{{/* kustomize's hashed name */}}
    {{- $_ := set .configMap "name" "hetero-exporter-config" -}}
  {{- end -}}
{{- end -}}
{{- $args := concat $c.args $v.extraArgs -}}
{{- with $v.web.configSecret -}}
  {{- $args = append $args (printf "--web.config.file=/etc/hetero-exporter-web/%s" $v.web.configKey) -}}
  {{- $_ := set $pod "volumes" (append $pod.volumes (dict "name" "web-config" "secret" (dict "secretName" .))) -}}
  {{- $_ := set $c "volumeMounts" (append $c.volumeMounts (dict "name" "web-config" "mountPath" "/etc/hetero-exporter-web" "readOnly" true)) -}}
{{- end -}}
{{- with $v.web.tlsSecret -}}
  {{- $_ := set $pod "volumes" (append $pod.volumes (dict "name" "web-tls" "secret" (dict "secretName" .))) -}}
  {{- $_ := set $c "volumeMounts" (append $c.volumeMounts (dict "name" "web-tls" "mountPath" "/etc/hetero-exporter-tls" "readOnly" true)) -}}
{{- end -}}
{{- if eq $v.web.scheme "HTTPS" -}}
  {{- $_ := set $c.livenessProbe.httpGet "scheme" "HTTPS" -}}
  {{- $_ := set $c.readinessProbe.httpGet "scheme" "HTTPS" -}}
{{- end -}}
{{- $_ := set $c "args" $args -}}
{{- $_ := set $c "env" (concat $c.env $v.extraEnv) -}}
{{- $tpl := $ds.spec.template -}}
{{- include "hetero-exporter.podMeta" (dict "pod" $tpl "ctx" $ctx) -}}
{{- $_ := set $tpl.metadata "annotations" (merge ($tpl.metadata.annotations | default dict) (dict "checksum/config" (include "hetero-exporter.config" $ctx | sha256sum))) -}}
{{- include "hetero-exporter.emit" (dict "obj" $ds "ctx" $ctx) -}}
{{- end -}}

{{/*
A prometheus-operator ServiceMonitor of deploy/ as serviceMonitor.kind asks (a PodMonitor selects
the pods by the same labels, with the same endpoints), the values applied. (dict "sm" SM "agent"
BOOL "ctx" $): the agents' monitor takes the relabelings, TLS and basic auth too.
*/}}
{{- define "hetero-exporter.monitor" -}}
{{- $m := .ctx.Values.serviceMonitor -}}
{{- $sm := .sm -}}
{{- $endpoints := list -}}
{{- range $sm.spec.endpoints -}}
  {{- $ep := . -}}
  {{- with $m.interval -}}{{- $_ := set $ep "interval" . -}}{{- end -}}
  {{- with $m.scrapeTimeout -}}{{- $_ := set $ep "scrapeTimeout" . -}}{{- end -}}
  {{- if $.agent -}}
    {{- $_ := set $ep "relabelings" (concat ($ep.relabelings | default list) $m.relabelings) -}}
    {{- with $m.metricRelabelings -}}{{- $_ := set $ep "metricRelabelings" . -}}{{- end -}}
    {{- if eq $.ctx.Values.web.scheme "HTTPS" -}}{{- $_ := set $ep "scheme" "https" -}}{{- end -}}
    {{- with $m.tlsConfig -}}{{- $_ := set $ep "tlsConfig" . -}}{{- end -}}
    {{- with $m.basicAuth -}}{{- $_ := set $ep "basicAuth" . -}}{{- end -}}
  {{- end -}}
  {{- $endpoints = append $endpoints $ep -}}
{{- end -}}
{{- $_ := set $sm.metadata "labels" (merge ($sm.metadata.labels | default dict) (deepCopy $m.labels)) -}}
{{- if eq $m.kind "PodMonitor" -}}
  {{- $spec := dict "jobLabel" $sm.spec.jobLabel "selector" $sm.spec.selector "podMetricsEndpoints" $endpoints -}}
  {{- $sm = dict "apiVersion" $sm.apiVersion "kind" "PodMonitor" "metadata" $sm.metadata "spec" $spec -}}
{{- else -}}
  {{- $_ := set $sm.spec "endpoints" $endpoints -}}
{{- end -}}
{{- include "hetero-exporter.emit" (dict "obj" $sm "ctx" .ctx) -}}
{{- end -}}
