//! `container.source = "build-remote"`: the Horovod image is built on the master, from the
//! recipe compiled into this binary (the Dockerfiles and `scripts/build-images`, some tens of
//! kilobytes sent inside the script), where the cloud's network reaches Debian's mirror and
//! PyPI; then it goes down the same fan-out tree as a transferred image ([`super::image`]).
//! Nothing of the image crosses the user's link, and a second `up` finds it up to date (the
//! build is idempotent) and sends nothing.

use base64::Engine as _;
use serde::Serialize;

use super::archive::{kept_line, reusable_archive, settle_archive, ImageFile};
use super::image::{fan_out_image, lacking};
use super::{room, BootstrapError, NodeSession};
use crate::images;
use crate::input::shown_message;
use crate::progress::Progress;
use crate::render::Renderer;

/// Where the recipe is unpacked on the master, and where its build logs go.
pub const RECIPE_DIR: &str = "/var/tmp/hvd-cluster-recipe";
pub const LOG_DIR: &str = "/var/tmp/hvd-cluster-build";

#[derive(Debug, Serialize)]
struct File {
    path: String,
    base64: String,
    mode: &'static str,
}

#[derive(Debug, Serialize)]
struct Switch {
    name: &'static str,
    value: &'static str,
}

#[derive(Debug, Serialize)]
struct Values<'a> {
    recipe_dir: &'static str,
    log_dir: &'static str,
    image: &'a str,
    files: Vec<File>,
    env: Vec<Switch>,
}

/// The script the master runs (as root): unpack the recipe, install debootstrap, build `image`
/// with the variant switches that name its tag, print `image_id=`. Pure.
pub fn build_script(renderer: &Renderer, image: &str) -> Result<String, BootstrapError> {
    let values = Values {
        recipe_dir: RECIPE_DIR,
        log_dir: LOG_DIR,
        image,
        files: images::recipe_files()
            .map(|f| File {
                base64: base64::engine::general_purpose::STANDARD.encode(f.text),
                mode: if f.executable { "755" } else { "644" },
                path: f.path,
            })
            .collect(),
        env: images::build_env(image)
            .iter()
            .map(|&(name, value)| Switch { name, value })
            .collect(),
    };
    Ok(renderer.script("image_build.sh", &values)?)
}

/// What the build printed last: the image's id, checked by its grammar (a node's output is
/// not trusted), and whether anything was built.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub id: String,
    pub built: bool,
}

pub fn parse_report(out: &str) -> Option<Built> {
    let id = out
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("image_id="))?;
    let hex = id.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Built {
        id: id.to_string(),
        built: out.lines().any(|l| l.trim() == "built=1"),
    })
}

/// Builds the image on the master (showing every build step as a line), then sends it to the
/// workers that lack that build. How many changes it made (0 on a second `up`).
pub(super) async fn build_on_master(
    renderer: &Renderer,
    image: &str,
    fanout: usize,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
) -> Result<usize, BootstrapError> {
    let master = &sessions[0];
    let name = master.node.name.as_str();
    let script = build_script(renderer, image)?;
    // Room first, when the master holds no build of the image yet (a rebuild reuses most of
    // the layers it has).
    if !lacking(image, None, &sessions[..1]).await?.is_empty() {
        room::check_build(image, master).await?;
    }
    let started = std::time::Instant::now();
    progress.line(format!(
        "{name}: building {image} on the master (container.source = \"build-remote\"; minutes the first time, seconds when up to date)"
    ));
    bars[0].set_message(format!("building {image}"));
    let out = master
        .ssh
        .sudo_streaming("build-images base horovod", &script, |line| {
            if images::is_step_line(line) {
                progress.line(format!("{name}:   {}", shown_message(line.trim(), 160)));
            }
            bars[0].set_message(shown_message(line.trim(), 80));
        })
        .await
        .map_err(|e| BootstrapError::Step {
            node: name.to_string(),
            step: "image (build-remote)".into(),
            detail: e.to_string(),
        })?;
    let Some(report) = parse_report(&out) else {
        return Err(BootstrapError::Other(format!(
            "{name}: the build on the master ended without the image's id; last output: {}",
            shown_message(out.trim(), 300)
        )));
    };
    progress.line(format!(
        "{name}: {image} {} on the master in {:.1}s ({})",
        if report.built { "built" } else { "up to date" },
        started.elapsed().as_secs_f64(),
        &report.id[..19]
    ));
    let workers = lacking(image, Some(&report.id), &sessions[1..]).await?;
    if !workers.is_empty() {
        // every node has zstd (the docker step installs it)
        let file = ImageFile { zstd: true };
        let kept = reusable_archive(master, image, file).await?;
        match master_image_bytes(master, image).await? {
            Some(unpacked) => {
                room::check_loads(image, master, &workers, unpacked, file.zstd, kept).await?
            }
            None => progress.line(format!(
                "{name}: could not read the size of {image}: the workers' room is not checked"
            )),
        }
        bars[0].set_message(format!(
            "serving {image} to {} worker(s) on port {}",
            workers.len(),
            super::IMAGE_PORT
        ));
        if kept {
            progress.line(kept_line(master));
        }
        let fanned = fan_out_image(master, &workers, image, file, kept, fanout).await;
        settle_archive(master, file).await;
        for line in fanned? {
            progress.line(&line);
        }
    }
    Ok(usize::from(report.built || !workers.is_empty()))
}

/// The unpacked size of the image on the master (`docker image inspect`), read by its
/// grammar: `None` for anything but a number.
async fn master_image_bytes(
    master: &NodeSession,
    image: &str,
) -> Result<Option<u64>, BootstrapError> {
    let out = master
        .ssh
        .sudo(&format!(
            "docker image inspect -f '{{{{.Size}}}}' {} 2>/dev/null || true",
            crate::ssh::shell_quote(image)
        ))
        .await?;
    Ok(parse_size(&out))
}

/// A byte count as `docker image inspect -f '{{.Size}}'` prints it. Pure.
pub fn parse_size(out: &str) -> Option<u64> {
    let out = out.trim();
    if out.is_empty() || !out.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    out.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script carries every recipe file, quoted, and the switches of the image's variant.
    #[test]
    fn the_script_carries_the_recipe_and_the_variant() {
        let r = Renderer::new().expect("templates");
        let s = build_script(&r, images::HOROVOD_TORCH_IMAGE).expect("script");
        assert!(
            s.contains("hvd_apt_install debootstrap"),
            "lib.sh and the install"
        );
        for f in images::recipe_files() {
            assert!(
                s.contains(&format!("\"$recipe.new/\"'{}'", f.path)),
                "{}",
                f.path
            );
        }
        assert!(s.contains("export HOROVOD_WITH_MPI='1'"), "{s}");
        assert!(s.contains("export HVD_WITH_TORCH='1'"), "{s}");
        assert!(s.contains("export HVD_WITH_TF='0'"), "{s}");
        // a switch left in the master's environment would build another variant under the tag
        let unset = s
            .lines()
            .find(|l| l.starts_with("unset "))
            .expect("an unset line");
        for switch in images::VARIANT_SWITCHES {
            assert!(unset.split(' ').any(|w| w == *switch), "{switch}: {unset}");
        }
        assert!(!s.contains("export HVD_CUDA="), "{s}");
        assert!(s.contains(&format!(
            "docker image inspect -f '{{{{.Id}}}}' '{}'",
            images::HOROVOD_TORCH_IMAGE
        )));
        assert!(s.contains("scripts/build-images\" base horovod < /dev/null"));
        let default = build_script(&r, images::HOROVOD_IMAGE).expect("script");
        assert!(!default.contains("export HOROVOD_WITH_MPI"), "{default}");
        // and bash reads it
        assert_eq!(crate::render::bash_syntax_error(&s), None);
    }

    /// The unpacked files are the recipe byte for byte: the script's base64 decodes to them.
    #[test]
    fn every_file_round_trips_through_the_script() {
        let r = Renderer::new().expect("templates");
        let s = build_script(&r, images::HOROVOD_IMAGE).expect("script");
        for f in images::recipe_files() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(f.text);
            assert!(
                s.contains(&format!("printf '%s' '{b64}' | base64 -d")),
                "{}",
                f.path
            );
        }
    }

    #[test]
    fn the_masters_image_size_is_read_by_its_grammar() {
        assert_eq!(parse_size("1334567890\n"), Some(1_334_567_890));
        for bad in [
            "",
            "\n",
            "-1",
            "12 GB",
            "1e9",
            "99999999999999999999999",
            "12; rm -rf /",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_report_is_read_by_its_grammar() {
        let id = format!("sha256:{}", "ab".repeat(32));
        let out = format!("[build-images] horovod: built x\nbuilt=1\nimage_id={id}\n");
        assert_eq!(
            parse_report(&out),
            Some(Built {
                id: id.clone(),
                built: true
            })
        );
        let again = format!("[build-images] horovod: up to date\nimage_id={id}\n");
        assert_eq!(parse_report(&again).map(|b| b.built), Some(false));
        for bad in [
            "image_id=".to_string(),
            "image_id=sha256:abc".to_string(),
            format!("image_id=sha256:{}; rm -rf /", "ab".repeat(32)),
            format!("image_id=sha512:{}", "ab".repeat(32)),
            "nothing".to_string(),
        ] {
            assert_eq!(parse_report(&bad), None, "{bad}");
        }
    }
}
