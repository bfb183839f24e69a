//! `schema`: the profile's JSON Schema, generated from the types that parse a profile
//! ([`crate::profile::json_schema`]); the repository ships the same text as
//! `profiles/profile.schema.json`, which every profile there names on its first line
//! (`#:schema ./profile.schema.json`, the header taplo reads).

use crate::cmd::output::{print_whole, to_json};
use crate::error::Error;

pub fn schema() -> Result<u8, Error> {
    print_whole(format!("{}\n", to_json(&crate::profile::json_schema())).as_bytes())
}
