//! The checkpoints of every workspace of a vault as one graph, drawn like
//! `git log --graph --oneline`: newest first, one column per line of descent. Edges are
//! `parent` (within a workspace, and from a fork's first checkpoint to the checkpoint it
//! was forked from) and, for a merge checkpoint `merge-FORK-STAMP` in workspace TARGET,
//! the fork's record `merged-into-TARGET-STAMP` (its state as merged) as second parent.

use std::collections::{BinaryHeap, HashMap};

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Result;
use crate::util::rfc3339;

#[derive(Clone, Debug, Serialize)]
pub struct NodeRef {
    pub name: String,
    pub workspace: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Node {
    pub name: String,
    pub workspace: String,
    /// First parent, then a merge's second parent.
    pub parents: Vec<NodeRef>,
    /// The workspaces whose head this is.
    pub heads: Vec<String>,
    pub created_at: String,
    pub origin: String,
    pub message: Option<String>,
    /// The column the node is drawn in (0 = leftmost).
    pub column: usize,
    #[serde(skip)]
    id: i64,
    #[serde(skip)]
    parent_ids: Vec<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    /// Newest first; every node comes before its parents.
    pub nodes: Vec<Node>,
    /// The drawing, one string per line (nodes and connector lines).
    pub lines: Vec<String>,
}

fn load(db: &Connection) -> Result<Vec<Node>> {
    let mut stmt = db.prepare(
        "SELECT c.id, c.name, w.name, c.parent, c.created_at_ns, c.origin, c.message,
                (SELECT group_concat(h.name, ' ') FROM workspace h WHERE h.head = c.id)
         FROM checkpoint c JOIN workspace w ON w.id = c.workspace ORDER BY c.id",
    )?;
    let rows = stmt.query_map([], |r| {
        let parent: Option<i64> = r.get(3)?;
        let heads: Option<String> = r.get(7)?;
        Ok(Node {
            id: r.get(0)?,
            name: r.get(1)?,
            workspace: r.get(2)?,
            parent_ids: parent.into_iter().collect(),
            parents: vec![],
            heads: heads
                .map(|h| h.split(' ').map(String::from).collect())
                .unwrap_or_default(),
            created_at: rfc3339(r.get(4)?),
            origin: r.get(5)?,
            message: r.get(6)?,
            column: 0,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The graph of every checkpoint in the vault.
pub fn graph(db: &Connection) -> Result<Graph> {
    let mut nodes = load(db)?;
    // Second parents of merges: (fork workspace, record name) -> id.
    let records: HashMap<(String, String), i64> = nodes
        .iter()
        .filter(|n| n.origin == "merge" && n.name.starts_with("merged-into-"))
        .map(|n| ((n.workspace.clone(), n.name.clone()), n.id))
        .collect();
    for n in nodes.iter_mut() {
        if n.origin != "merge" {
            continue;
        }
        let Some(rest) = n.name.strip_prefix("merge-") else {
            continue;
        };
        let Some((fork, stamp)) = rest.rsplit_once('-') else {
            continue;
        };
        let record = format!("merged-into-{}-{stamp}", n.workspace);
        if let Some(&id) = records.get(&(fork.to_string(), record)) {
            n.parent_ids.push(id);
        }
    }
    let order = newest_first(&nodes);
    let mut nodes: Vec<Node> = {
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        order.iter().map(|&i| slots[i].take().unwrap()).collect()
    };
    let refs: HashMap<i64, NodeRef> = nodes
        .iter()
        .map(|n| {
            (
                n.id,
                NodeRef {
                    name: n.name.clone(),
                    workspace: n.workspace.clone(),
                },
            )
        })
        .collect();
    for n in nodes.iter_mut() {
        n.parents = n
            .parent_ids
            .iter()
            .filter_map(|p| refs.get(p).cloned())
            .collect();
    }
    let lines = draw(&mut nodes);
    Ok(Graph { nodes, lines })
}

/// Indices of `nodes` so that every node precedes its parents, newest (highest id)
/// first among those ready (Kahn's algorithm on a max-heap).
fn newest_first(nodes: &[Node]) -> Vec<usize> {
    let index: HashMap<i64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    let mut children = vec![0usize; nodes.len()];
    for n in nodes {
        for p in &n.parent_ids {
            if let Some(&i) = index.get(p) {
                children[i] += 1;
            }
        }
    }
    let mut ready: BinaryHeap<(i64, usize)> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| children[*i] == 0)
        .map(|(i, n)| (n.id, i))
        .collect();
    let mut out = Vec::with_capacity(nodes.len());
    while let Some((_, i)) = ready.pop() {
        out.push(i);
        for p in &nodes[i].parent_ids {
            if let Some(&j) = index.get(p) {
                children[j] -= 1;
                if children[j] == 0 {
                    ready.push((nodes[j].id, j));
                }
            }
        }
    }
    out
}

fn cells(lanes: &[Option<i64>]) -> Vec<char> {
    let mut row = vec![' '; lanes.len() * 2];
    for (i, l) in lanes.iter().enumerate() {
        if l.is_some() {
            row[2 * i] = '|';
        }
    }
    row
}

fn text(row: Vec<char>) -> String {
    row.into_iter().collect::<String>().trim_end().to_string()
}

/// Assigns columns and draws: each lane waits for the node it leads to.
fn draw(nodes: &mut [Node]) -> Vec<String> {
    let mut lanes: Vec<Option<i64>> = vec![];
    let mut lines = vec![];
    for n in nodes.iter_mut() {
        let waiting: Vec<usize> = (0..lanes.len())
            .filter(|&i| lanes[i] == Some(n.id))
            .collect();
        let col = match waiting.first() {
            Some(&c) => c,
            None => match lanes.iter().position(|l| l.is_none()) {
                Some(c) => c,
                None => {
                    lanes.push(None);
                    lanes.len() - 1
                }
            },
        };
        // Lines of descent that end here join this column first.
        if waiting.len() > 1 {
            let mut row = cells(&lanes);
            for &i in &waiting[1..] {
                row[2 * i] = ' ';
                row[2 * i - 1] = '/';
                lanes[i] = None;
            }
            lines.push(text(row));
        }
        lanes[col] = Some(n.id);
        let mut row = cells(&lanes);
        row[2 * col] = '*';
        let heads = if n.heads.is_empty() {
            String::new()
        } else {
            format!(" (head of {})", n.heads.join(", "))
        };
        let label = format!(
            "{} [{}]{} {} {}{}",
            n.name,
            n.workspace,
            heads,
            &n.created_at[..19.min(n.created_at.len())],
            n.origin,
            n.message
                .as_deref()
                .map(|m| format!("  {m}"))
                .unwrap_or_default()
        );
        lines.push(format!("{} {label}", text(row).trim_end()));
        n.column = col;
        lanes[col] = n.parent_ids.first().copied();
        // A merge's second parent gets a lane of its own unless one already leads there.
        if let Some(&second) = n.parent_ids.get(1)
            && !lanes.contains(&Some(second))
        {
            let at = match (col + 1..lanes.len()).find(|&i| lanes[i].is_none()) {
                Some(i) => i,
                None => {
                    lanes.push(None);
                    lanes.len() - 1
                }
            };
            lanes[at] = Some(second);
            let mut row = cells(&lanes);
            row[2 * at] = ' ';
            row[2 * at - 1] = '\\';
            lines.push(text(row));
        }
        while lanes.last() == Some(&None) {
            lanes.pop();
        }
    }
    lines
}
