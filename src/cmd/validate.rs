//! `validate`: the profile checked without any network call.

use std::path::Path;

use crate::context::Context;
use crate::error::Error;
use crate::profile;

pub async fn validate(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let p = profile::load(file)?;
    if !ctx.quiet {
        println!(
            "{}: ok — cluster `{}` on {}, a master and {} worker(s)",
            file.display(),
            p.name,
            p.provider.label(),
            p.workers.count
        );
    }
    Ok(0)
}
