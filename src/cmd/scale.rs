//! `scale`: writes the new worker count into the profile, then converges as `up` does (new
//! workers are bootstrapped and checked before discovery lists them; leaving ones are
//! dropped from discovery before they are deleted).

use std::path::Path;

use super::shown_path;
use crate::context::Context;
use crate::error::Error;
use crate::profile;
use crate::state;

pub async fn scale(ctx: &Context, file: &Path, workers: u32) -> Result<u8, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("{}: {e}", shown_path(file))))?;
    let edited = profile::with_worker_count(&text, workers).ok_or_else(|| {
        Error::Usage(format!(
            "{}: no `count = N` line under [workers] to change",
            shown_path(file)
        ))
    })?;
    profile::parse(file, &edited)?;
    if edited != text {
        state::write_atomic(file, edited.as_bytes(), 0o644)?;
        ctx.progress
            .line(format!("{}: workers.count = {workers}", file.display()));
    }
    super::up::up(ctx, file, false).await
}
