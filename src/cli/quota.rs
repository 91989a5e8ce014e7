//! quota, quota set, quota clear.

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use super::output::human_size;
use crate::error::Result;
use crate::workspace::{Quota, Workspace, cli_actor};

#[derive(Args, Debug)]
pub struct QuotaArgs {
    #[command(subcommand)]
    cmd: Option<QuotaCmd>,
}

#[derive(Subcommand, Debug)]
enum QuotaCmd {
    /// Set limits (sizes take K, M, G suffixes: 10M, 1.5G); unset ones stay as they are.
    Set {
        /// Limit the whole vault instead of this workspace.
        #[arg(long)]
        vault_wide: bool,
        #[arg(long, value_name = "SIZE")]
        max_bytes: Option<String>,
        #[arg(long, value_name = "N")]
        max_files: Option<u64>,
        #[arg(long, value_name = "SIZE")]
        max_file_size: Option<String>,
    },
    /// Remove limits.
    Clear {
        #[arg(long)]
        vault_wide: bool,
    },
}

pub use crate::util::parse_size;

pub fn run(ctx: &Ctx, a: QuotaArgs) -> Result<i32> {
    match a.cmd {
        None => {
            let (v, mut store) = ctx.open()?;
            let (ws_q, vault_q, usage, vault_bytes) = store.write(|db| {
                let mut ws = Workspace::open(db, &v.workspace)?;
                let (w, vq) = ws.quotas()?;
                Ok((w, vq, ws.usage()?, ws.vault_bytes()?))
            })?;
            let value = json!({"vault": v.name, "workspace": v.workspace, "workspace_quota": ws_q, "vault_quota": vault_q,
                "usage": {"files": usage.files, "bytes": usage.bytes, "vault_bytes": vault_bytes}});
            ctx.out.emit(&value, || {
                let show = |q: &Option<Quota>| match q {
                    None => "none".to_string(),
                    Some(q) => format!(
                        "max bytes {}, max files {}, max file size {}",
                        q.max_bytes.map(human_size).unwrap_or("-".into()),
                        q.max_files.map(|n| n.to_string()).unwrap_or("-".into()),
                        q.max_file_size.map(human_size).unwrap_or("-".into())
                    ),
                };
                println!(
                    "workspace {}: {} files, {}; quota: {}",
                    v.workspace,
                    usage.files,
                    human_size(usage.bytes),
                    show(&ws_q)
                );
                println!(
                    "vault {}: {} in the file; quota: {}",
                    v.name,
                    human_size(vault_bytes),
                    show(&vault_q)
                );
            });
        }
        Some(QuotaCmd::Set {
            vault_wide,
            max_bytes,
            max_files,
            max_file_size,
        }) => {
            let max_bytes = max_bytes.as_deref().map(parse_size).transpose()?;
            let max_file_size = max_file_size.as_deref().map(parse_size).transpose()?;
            let (v, mut store) = ctx.open()?;
            let q = store.write(|db| {
                Workspace::open(db, &v.workspace)?.set_quota(
                    vault_wide,
                    max_bytes,
                    max_files,
                    max_file_size,
                    cli_actor(),
                )
            })?;
            ctx.out.emit(&json!({"quota": q}), || {
                println!(
                    "quota set for {}",
                    if vault_wide {
                        "the vault"
                    } else {
                        &v.workspace
                    }
                )
            });
        }
        Some(QuotaCmd::Clear { vault_wide }) => {
            let (v, mut store) = ctx.open()?;
            store.write(|db| {
                Workspace::open(db, &v.workspace)?.clear_quota(vault_wide, cli_actor())
            })?;
            ctx.out.emit(
                &json!({"cleared": if vault_wide { "vault" } else { "workspace" }}),
                || println!("quota cleared"),
            );
        }
    }
    Ok(0)
}
