"""What the agent should do to its Node now: a pure function of the Node as read, the snapshot
with its verdicts, the agent's own bookkeeping on the Node, and the configuration.

``plan(...) -> Plan``: a strategic-merge patch for the Node (taints, cordon, labels, the inventory and
bookkeeping annotations), a strategic-merge patch for the ``AcceleratorUnhealthy`` condition,
the events to send, and a line of explanation per decision. health/act/remedy.py applies it;
``hetero-exporter health --dry-run`` prints it.

The plan is composed (compose.py) from typed sub-plans, each a pure function in its own module:
announce (device fault and recovery events), taint (with the budget, budget.py), cordon,
condition, inventory (devices annotation and labels), cluster (black-hole node faults, DRA device
taints, pod signals, scheduler annotations and the opt-in NFD NodeFeature of nodefeature.py over a
ClusterView), bookkeeping (book.py: the agent's record
on the Node, which makes it safe across restarts). config.py holds the settings, text.py the
texts they write.
"""

from hetero_exporter.health.plan.announce import Announcements, announce, with_node_actions
from hetero_exporter.health.plan.book import (BOOK_VERSION, Book, occurrences_from_json, sticky_from_json,
                                              sticky_to_json)
from hetero_exporter.health.plan.bookkeeping import Bookkeeping, bookkeeping, keep_books, node_patch
from hetero_exporter.health.plan.budget import Budget, needs_budget, taint_would_be_added
from hetero_exporter.health.plan.cluster import ClusterView, NodeFaults, plan_node_faults
from hetero_exporter.health.plan.compose import Plan, plan
from hetero_exporter.health.plan.condition import ConditionPlan, plan_condition
from hetero_exporter.health.plan.config import (CONDITION_TYPE, DEFAULT_BUDGET_NAMESPACE, INVENTORY_OUTLETS, MODES,
                                                OTHER_HEALTH_KEYS, SCHEDULERS, RemedyConfig)
from hetero_exporter.health.plan.cordon import CordonPlan, plan_cordon
from hetero_exporter.health.plan.inventory import InventoryPlan, inventory, plan_inventory, selection_labels
from hetero_exporter.health.plan.nodefeature import NodeFeaturePlan, NodeFeatureRead
from hetero_exporter.health.plan.taint import TaintPlan, plan_taint
from hetero_exporter.health.detect.texts import (_event_id, device_name, event_id, fault_text, label_value,
                                              parse_rfc3339, rfc3339)

__all__ = [
    "Announcements", "BOOK_VERSION", "Book", "Bookkeeping", "Budget", "CONDITION_TYPE", "ClusterView",
    "ConditionPlan", "CordonPlan", "DEFAULT_BUDGET_NAMESPACE", "INVENTORY_OUTLETS", "InventoryPlan", "MODES",
    "NodeFaults", "NodeFeaturePlan", "NodeFeatureRead", "OTHER_HEALTH_KEYS",
    "Plan", "RemedyConfig", "SCHEDULERS", "TaintPlan", "_event_id", "announce", "bookkeeping", "device_name",
    "event_id", "fault_text", "inventory", "keep_books", "occurrences_from_json", "label_value", "needs_budget", "node_patch",
    "parse_rfc3339", "plan", "plan_node_faults", "plan_condition", "plan_cordon", "plan_inventory", "plan_taint", "rfc3339",
    "selection_labels", "sticky_from_json", "sticky_to_json", "taint_would_be_added", "with_node_actions",
]
