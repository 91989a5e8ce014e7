//! `avfs output EXEC_ID`: the full output of an exec, kept on disk
//! (`crate::exec::outputs`), in pages.

use std::io::Write;

use clap::{Args, ValueEnum};

use super::Ctx;
use crate::documents::files::ExecOutput;
use crate::error::{Error, Result};
use crate::exec::outputs::{self, Stream};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StreamArg {
    Stdout,
    Stderr,
}

#[derive(Args, Debug)]
pub struct OutputArgs {
    /// The exec's id: the envelope's `id` (also in its `avfs audit` row), or the name of a
    /// checkpoint it took (`exec-…`, as `avfs log` and `checkpoint list` show it).
    exec_id: String,
    /// Which stream.
    #[arg(long, value_enum, default_value = "stdout")]
    stream: StreamArg,
    /// Start at this byte of the stream.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offset: u64,
    /// Bytes at most (default: to the end; with --json, 16384).
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

pub fn output(ctx: &Ctx, a: OutputArgs) -> Result<i32> {
    let stream = match a.stream {
        StreamArg::Stdout => Stream::Stdout,
        StreamArg::Stderr => Stream::Stderr,
    };
    let limit = a.limit.or(ctx.out.json.then_some(outputs::DEFAULT_PAGE));
    let page = outputs::read(&ctx.home, &a.exec_id, stream, a.offset, limit)?;
    let (encoding, content) = ExecOutput::encode(&page.data);
    let doc = ExecOutput {
        bytes: page.data.len() as u64,
        content,
        encoding,
        exec: page.record.exec.clone(),
        finished: page.record.finished,
        next_offset: page.next_offset(),
        offset: page.offset,
        size: page.kept,
        stream: stream.name().into(),
        total_bytes: page.total,
        truncated: page.truncated(),
    };
    if ctx.out.json {
        ctx.out.emit(&doc, || {});
        return Ok(0);
    }
    // People and pipes get the bytes as they are; what is left over goes to stderr.
    let mut so = std::io::stdout().lock();
    so.write_all(&page.data)
        .and_then(|_| so.flush())
        .map_err(|e| Error::host("stdout", e))?;
    if let Some(n) = doc.next_offset {
        eprintln!(
            "avfs: {} more bytes: avfs output {} --stream {} --offset {n}",
            doc.size - n,
            doc.exec,
            doc.stream
        );
    }
    if doc.truncated && doc.next_offset.is_none() {
        eprintln!(
            "avfs: the {} was cut on disk: {} of its {} bytes are kept",
            doc.stream, doc.size, doc.total_bytes
        );
    }
    Ok(0)
}
