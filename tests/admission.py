"""What the API server does with the agent's token, from deploy/'s own objects: RBAC
(ClusterRole/Role and their bindings) and the node-restriction ValidatingAdmissionPolicy, its CEL
evaluated with cel-python as the API server evaluates it for one request.

``install(kube_api, objs, node)`` puts both in front of the loopback API server (tests/kubeapi.py)
and returns a token of the agent's ServiceAccount bound to a pod on ``node`` (its
``authentication.kubernetes.io/node-name``): the token a thief would hold. ``deploy_objects()``
reads deploy/base (and components) without kustomize: the namespaced objects in the base's
namespace, as its kustomization puts them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

import kubeapi

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}
_FILES = ("rbac.yaml", "node-restriction.yaml")  # the base's files of RBAC and admission


def deploy_objects(components: Iterable[str] = ()) -> list[dict]:
    """deploy/base's RBAC and admission policy, plus each component's rbac.yaml, in the base's
    namespace (as ``kubectl kustomize`` renders them; tests/test_deploy.py checks the rendering)."""
    namespace = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["namespace"]
    paths = [DEPLOY / "base" / f for f in _FILES] + [DEPLOY / "components" / c / "rbac.yaml" for c in components]
    objs = [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]
    for o in objs:
        if o["kind"] not in CLUSTER_SCOPED:
            o["metadata"]["namespace"] = namespace
    return objs


class AdmissionPolicy:
    """A ValidatingAdmissionPolicy evaluated as the API server does for one request (cel-python):
    outside matchConstraints or matchConditions it does not apply; otherwise every validation must
    hold, and an evaluation error denies (failurePolicy Fail). Variables are evaluated in order,
    each seeing the ones before (the API server evaluates them lazily; an error in one that a
    validation would not reach denies here, which only makes this stricter)."""

    def __init__(self, vap: dict):
        import celpy
        self._celpy = celpy
        env = celpy.Environment()
        spec = vap["spec"]
        assert spec["failurePolicy"] == "Fail"
        self.name = vap["metadata"]["name"]
        self.rules = spec["matchConstraints"]["resourceRules"]
        compile_ = lambda e: env.program(env.compile(e))  # noqa: E731
        self.conditions = [compile_(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], compile_(v["expression"])) for v in spec.get("variables") or ()]
        self.validations = [(compile_(v["expression"]), v.get("message"),
                             compile_(v["messageExpression"]) if v.get("messageExpression") else None,
                             v.get("reason", "Invalid")) for v in spec["validations"]]

    def _matches(self, request: dict) -> bool:
        res = request["resource"]["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
        return any(request["resource"]["group"] in r["apiGroups"] and request["operation"] in r["operations"]
                   and res in r["resources"] for r in self.rules)

    def denial(self, request: dict, obj: Optional[dict], old: Optional[dict] = None) -> Optional[tuple[str, str]]:
        """None when admitted; else (reason, message) of the first validation that fails.
        ``obj`` is null for a DELETE, ``old`` for a CREATE, as the API server passes them."""
        celpy = self._celpy
        if not self._matches(request):
            return None
        act: dict[str, Any] = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj),
                               "oldObject": celpy.json_to_cel(old)}
        if not all(bool(c.evaluate(act)) for c in self.conditions):
            return None
        values = celpy.celtypes.MapType({})
        act["variables"] = values
        try:
            for name, program in self.variables:
                values[celpy.celtypes.StringType(name)] = program.evaluate(act)
        except celpy.CELEvalError as e:
            return "InternalError", f"policy '{self.name}' failed to evaluate: {e}"
        for program, message, message_expr, reason in self.validations:
            try:
                if bool(program.evaluate(act)) is True:
                    continue
            except celpy.CELEvalError as e:  # failurePolicy: Fail
                return "InternalError", f"expression failed to evaluate: {e}"
            text = message or ""
            if message_expr is not None:
                try:
                    text = str(message_expr.evaluate(act))
                except celpy.CELEvalError:
                    pass
            return reason, text or "failed expression"
        return None

    def admits(self, request: dict, obj: Optional[dict], old: Optional[dict] = None) -> bool:
        return self.denial(request, obj, old) is None

    def hook(self, request: dict, obj: Optional[dict], old: Optional[dict]) -> Optional[kubeapi.ApiError]:
        """kubeapi's admission hook: the API server's answer to a denied request."""
        denied = self.denial(request, obj, old)
        if denied is None:
            return None
        reason, message = denied
        code = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}.get(reason, 422)
        text = f"ValidatingAdmissionPolicy '{self.name}' with binding '{self.name}' denied request: {message}"
        return kubeapi.ApiError(code, reason if code != 422 else "Invalid", text)


class Rbac:
    """RBAC's authorizer over the given roles and bindings: a request is allowed when a rule of a
    role bound to the user (a ClusterRoleBinding anywhere, a RoleBinding in its namespace only)
    names its API group, resource (``pods/eviction`` for a subresource), verb and, where the rule
    lists resourceNames, its name."""

    def __init__(self, objs: list[dict]):
        roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["rules"]
                 for o in objs if o["kind"] in ("ClusterRole", "Role")}
        self.grants: list[tuple[dict, str, list[dict]]] = []  # (subject, namespace scope or "", rules)
        for b in objs:
            if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            ref = b["roleRef"]
            scope = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
            rules = roles.get((ref["kind"], scope if ref["kind"] == "Role" else "", ref["name"]), [])
            for subject in b.get("subjects") or ():
                self.grants.append((subject, scope, rules))

    @staticmethod
    def _is(subject: dict, user: kubeapi.UserInfo) -> bool:
        if subject["kind"] == "ServiceAccount":
            return user.username == f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
        if subject["kind"] == "Group":
            return subject["name"] in user.groups
        return subject["name"] == user.username

    def allows(self, a: kubeapi.Attributes) -> bool:
        resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        for subject, scope, rules in self.grants:
            if not self._is(subject, a.user) or (scope and scope != a.namespace):
                continue
            for r in rules:
                if (a.group in r.get("apiGroups", ()) or "*" in r.get("apiGroups", ())) \
                        and (resource in r.get("resources", ()) or "*" in r.get("resources", ())) \
                        and (a.verb in r["verbs"] or "*" in r["verbs"]) \
                        and (not r.get("resourceNames") or a.name in r["resourceNames"]):
                    return True
        return False


def agent_username(objs: list[dict]) -> str:
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
    return f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"


def install(kube_api: kubeapi.KubeAPIServer, objs: list[dict], node: str) -> str:
    """RBAC and the admission policy of ``objs`` in front of ``kube_api``; returns the token of
    the agent's ServiceAccount bound to a pod on ``node`` (another call: another node's token)."""
    if kube_api.authorizer is None:
        kube_api.authorizer = Rbac(objs).allows
        (vap,) = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
        kube_api.admission.append(AdmissionPolicy(vap).hook)
    token = f"agent-token-{node}"
    kube_api.add_user(token, agent_username(objs),
                      extra={NODE_NAME_KEY: [node], POD_NAME_KEY: [f"hetero-exporter-{node[:40]}"]})
    return token
