//! The grammars of a transfer's paths: where on the cluster (a path below `/shared`, from the
//! command line or a profile's `[[data]]`) and each name inside a tree (bytes, from a local
//! folder or from the master). Pure.

use crate::input::{self, Refused};

/// The folder every transfer lands in or comes from, on the master.
pub const SHARED: &str = "/shared";

/// A path below `/shared` (never `/shared` itself), plain: no `.` or `..`, no empty part, no
/// control character. Shown and sent as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPath(String);

impl SharedPath {
    /// `/shared/a/b`, or `a/b` read as below `/shared`; a trailing `/` is dropped.
    pub fn parse(raw: &str) -> Result<SharedPath, Refused> {
        let bad = |why: &str| Refused(format!("`{}`: {why}", input::shown(raw)));
        if raw.chars().any(char::is_control) {
            return Err(bad("a path on the cluster holds a control character"));
        }
        let rest = match raw.strip_prefix('/') {
            Some(abs) => match abs.strip_prefix("shared") {
                Some("") | Some("/") => {
                    return Err(bad(
                        "name a folder or file below /shared, not /shared itself",
                    ))
                }
                Some(below) if below.starts_with('/') => &below[1..],
                _ => return Err(bad("only paths below /shared can be sent or fetched")),
            },
            None => raw,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err(bad("an empty path"));
        }
        for part in rest.split('/') {
            match part {
                "" => return Err(bad("an empty part (`//`)")),
                "." | ".." => return Err(bad("`.` and `..` are not allowed")),
                _ => {}
            }
        }
        Ok(SharedPath(format!("{SHARED}/{rest}")))
    }

    /// `/shared/NAME` for a local file or folder's own name; a name that cannot be written on a
    /// command line as it is (not UTF-8, a control character) is refused by name.
    pub fn for_name(name: &[u8]) -> Result<SharedPath, Refused> {
        let text = std::str::from_utf8(name).map_err(|_| {
            Refused(format!(
                "`{}` is not UTF-8: name the path on the cluster",
                shown_bytes(name)
            ))
        })?;
        if text.contains('/') || text == "." || text == ".." || text.is_empty() {
            return Err(Refused(format!(
                "`{}` is not a file or folder name: name the path on the cluster",
                input::shown(text)
            )));
        }
        SharedPath::parse(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last part of the path.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }
}

impl std::fmt::Display for SharedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&input::shown(&self.0))
    }
}

/// A name inside a tree, relative to its root: parts joined by `/`, none empty, `.` or `..`,
/// no NUL. The empty name is the root itself. Any other byte is fine (a file may be called
/// "a\nb" or be in Latin-1): it is carried, never interpreted.
pub fn check_relative(path: &[u8]) -> Result<(), Refused> {
    if path.is_empty() {
        return Ok(());
    }
    for part in path.split(|b| *b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.contains(&0) {
            return Err(Refused(format!(
                "`{}`: not a plain name inside the tree",
                shown_bytes(path)
            )));
        }
    }
    Ok(())
}

/// A name of bytes as it may appear in a message (escaped, shortened).
pub fn shown_bytes(name: &[u8]) -> String {
    let text: String = name
        .utf8_chunks()
        .flat_map(|c| {
            let valid = c.valid().chars().collect::<String>();
            let invalid: String = c.invalid().iter().map(|b| format!("\\x{b:02x}")).collect();
            [valid, invalid]
        })
        .collect();
    input::shown(&text)
}

/// A `[[data]]` source in the cloud's object store: `CONTAINER` or `CONTAINER/PREFIX`, the
/// objects below that prefix. The container is named in the data credential's access rules
/// (a path Keystone matches, where `*` and `{}` would widen it), so it keeps to letters,
/// digits, `.`, `_` and `-`; the prefix is a folder inside it: non-empty parts, none `.` or `..`,
/// no control character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSource {
    pub container: String,
    /// Without a trailing `/`; empty for the whole container.
    pub prefix: String,
}

impl ObjectSource {
    pub fn parse(raw: &str) -> Result<ObjectSource, Refused> {
        let bad = |why: &str| Refused(format!("`{}`: {why}", input::shown(raw)));
        if raw.chars().any(char::is_control) {
            return Err(bad("holds a control character"));
        }
        if raw.len() > 1024 {
            return Err(bad("longer than 1024 bytes"));
        }
        let (container, prefix) = raw.split_once('/').unwrap_or((raw, ""));
        if container.is_empty()
            || container.len() > 255
            || container == "."
            || container == ".."
            || !container
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(bad(
                "the container (before the first `/`) may hold only letters, digits, `.`, `_` and `-`, at most 255",
            ));
        }
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        if !prefix.is_empty() {
            for part in prefix.split('/') {
                match part {
                    "" => return Err(bad("an empty part (`//`) in the prefix")),
                    "." | ".." => return Err(bad("`.` and `..` are not allowed in the prefix")),
                    _ => {}
                }
            }
        }
        Ok(ObjectSource {
            container: container.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// Where it lands by default: `/shared/<the prefix's last part, or the container>`.
    pub fn default_place(&self) -> Result<SharedPath, Refused> {
        let name = self.prefix.rsplit('/').next().filter(|n| !n.is_empty());
        SharedPath::for_name(name.unwrap_or(&self.container).as_bytes())
    }
}

impl std::fmt::Display for ObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            f.write_str(&self.container)
        } else {
            write!(f, "{}/{}", self.container, input::shown(&self.prefix))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_below_shared_are_taken_and_everything_else_refused_by_name() {
        assert_eq!(
            SharedPath::parse("/shared/data").unwrap().as_str(),
            "/shared/data"
        );
        assert_eq!(
            SharedPath::parse("data/train/").unwrap().as_str(),
            "/shared/data/train"
        );
        assert_eq!(SharedPath::parse("a b/ç").unwrap().name(), "ç");
        for hostile in [
            "/shared",
            "/shared/",
            "/etc/passwd",
            "/sharedx/a",
            "/shared/../etc",
            "../etc",
            "a/./b",
            "a//b",
            "",
            "/",
            "a\nb",
            "\u{1b}[31mred",
        ] {
            let e = SharedPath::parse(hostile).unwrap_err().0;
            assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
        }
        assert!(SharedPath::for_name(b"..").is_err());
        assert!(SharedPath::for_name(b"\xffname")
            .unwrap_err()
            .0
            .contains("`\\xffname`"));
        assert_eq!(
            SharedPath::for_name(b"my data").unwrap().as_str(),
            "/shared/my data"
        );
    }

    #[test]
    fn names_inside_a_tree_are_bytes_but_never_climb_out() {
        for fine in [&b""[..], b"a", b"a/b c/\xff\n", b"...", b".hidden/x"] {
            check_relative(fine).unwrap();
        }
        for hostile in [
            &b"/etc"[..],
            b"a/../../x",
            b"..",
            b"a//b",
            b"a/",
            b"./a",
            b"a\0b",
        ] {
            assert!(check_relative(hostile).is_err(), "{hostile:?}");
        }
        assert_eq!(shown_bytes(b"a\n\xff"), "a\\n\\xff");
    }

    #[test]
    fn object_sources_name_a_plain_container_and_a_folder_inside_it() {
        let s = ObjectSource::parse("datasets/imagenet/train/").unwrap();
        assert_eq!(
            (s.container.as_str(), s.prefix.as_str()),
            ("datasets", "imagenet/train")
        );
        assert_eq!(s.default_place().unwrap().as_str(), "/shared/train");
        let whole = ObjectSource::parse("ds-2026.v1").unwrap();
        assert_eq!(whole.prefix, "");
        assert_eq!(
            whole.default_place().unwrap().as_str(),
            "/shared/ds-2026.v1"
        );
        assert_eq!(
            ObjectSource::parse("ds/a b/ü").unwrap().prefix,
            "a b/ü",
            "a prefix is any text without control characters"
        );
        let long = format!("ds/{}", "x".repeat(1100));
        for (bad, says) in [
            ("", "the container"),
            ("/x", "the container"),
            ("..", "the container"),
            ("ds*", "the container"),
            ("ds{x}", "the container"),
            ("d s/x", "the container"),
            ("$(id)/x", "the container"),
            ("ds/../etc", "`..`"),
            ("ds/./x", "`.`"),
            ("ds/a//b", "empty part"),
            ("ds/a\nb", "control character"),
            ("ds/a\0b", "control character"),
            ("ds/\u{1b}[31m", "control character"),
            (long.as_str(), "longer than 1024"),
        ] {
            let e = ObjectSource::parse(bad).expect_err(bad);
            assert!(e.0.contains(says), "{bad:?}: {}", e.0);
            assert!(
                !e.0.contains('\n') && !e.0.contains('\0') && !e.0.contains('\u{1b}'),
                "{}",
                e.0
            );
            assert!(e.0.len() < 300, "{} bytes", e.0.len());
        }
    }
}
