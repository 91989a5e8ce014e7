//! What the policy says about a command: a category per finding, an action per category,
//! and the strictest finding as the decision.

use serde::{Deserialize, Serialize};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    ReadOnly,
    Mutating,
    Destructive,
    Networked,
    HostEscapeRisk,
    Unknown,
}

impl Category {
    /// The name used everywhere (JSON, docs, human output): `read_only`, never `ReadOnly`.
    pub fn name(self) -> &'static str {
        match self {
            Category::ReadOnly => "read_only",
            Category::Mutating => "mutating",
            Category::Destructive => "destructive",
            Category::Networked => "networked",
            Category::HostEscapeRisk => "host_escape_risk",
            Category::Unknown => "unknown",
        }
    }

    pub fn from_name(s: &str) -> Option<Category> {
        use Category::*;
        [
            ReadOnly,
            Mutating,
            Destructive,
            Networked,
            HostEscapeRisk,
            Unknown,
        ]
        .into_iter()
        .find(|c| c.name() == s)
    }
}

/// Ordered from least to most strict.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    AllowWithCheckpoint,
    RequireApproval,
    Deny,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::AllowWithCheckpoint => "allow_with_checkpoint",
            Action::RequireApproval => "require_approval",
            Action::Deny => "deny",
        }
    }

    pub fn from_name(s: &str) -> Option<Action> {
        use Action::*;
        [Allow, AllowWithCheckpoint, RequireApproval, Deny]
            .into_iter()
            .find(|a| a.name() == s)
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Finding {
    pub program: String,
    pub category: Category,
    pub action: Action,
    pub rule: String,
    pub reason: String,
    /// The rule grants a sandboxed command the network (not part of the JSON: the
    /// envelope's `sandbox.network_granted_by` names the rule).
    #[serde(skip)]
    pub network: bool,
    /// A policy file's rule set the decision outright: a sandboxed run keeps it.
    #[serde(skip)]
    pub explicit: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Decision {
    pub action: Action,
    pub categories: Vec<Category>,
    pub matched_rule: String,
    pub reason: String,
    pub findings: Vec<Finding>,
}

/// The strictest finding decides; every category found is listed.
pub(crate) fn combine(findings: Vec<Finding>) -> Decision {
    let worst = findings
        .iter()
        .max_by_key(|f| (f.action, f.category))
        .cloned()
        .expect("at least one finding");
    let mut categories: Vec<Category> = findings.iter().map(|f| f.category).collect();
    categories.sort();
    categories.dedup();
    Decision {
        action: worst.action,
        categories,
        matched_rule: worst.rule.clone(),
        reason: worst.reason.clone(),
        findings,
    }
}

impl Decision {
    /// The first rule among the findings that grants a sandboxed command the network.
    pub fn network_rule(&self) -> Option<&str> {
        self.findings
            .iter()
            .find(|f| f.network)
            .map(|f| f.rule.as_str())
    }
}
