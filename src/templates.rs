//! Every file under `templates/` that reaches a node, compiled into the binary and named in one
//! table: the tera templates the renderer loads ([`ALL`]; the bootstrap steps name theirs by
//! these constants) and the plain files copied as they are ([`IMAGE_SERVE`], [`IMAGE_FETCH`],
//! [`IMAGE_MIRROR`], [`AUTOSTOP_AGENT`], [`JOB_RUNNER`], [`TREE_SYNC`], [`CHECK_JOB`]). A new template is one constant here and one entry in [`ALL`]. Pure data.

/// A template shipped in the binary: its name (as the renderer knows it) and its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Template {
    pub name: &'static str,
    pub text: &'static str,
}

/// `templates/node/NAME`.
macro_rules! node_template {
    ($name:literal) => {
        Template {
            name: $name,
            text: include_str!(concat!("../templates/node/", $name)),
        }
    };
}

// The bootstrap steps' scripts: `*.check.sh` passes when the step has nothing to do.
pub const CLOUD_INIT_CHECK: Template = node_template!("cloud-init.check.sh");
pub const DATA_DISK_CHECK: Template = node_template!("data_disk.check.sh");
pub const DATA_DISK_APPLY: Template = node_template!("data_disk.apply.sh");
pub const DOCKER_CHECK: Template = node_template!("docker.check.sh");
pub const DOCKER_APPLY: Template = node_template!("docker.apply.sh");
pub const GPU_CHECK: Template = node_template!("gpu.check.sh");
pub const GPU_APPLY: Template = node_template!("gpu.apply.sh");
pub const SHARED_CHECK: Template = node_template!("shared.check.sh");
pub const SHARED_APPLY: Template = node_template!("shared.apply.sh");
pub const CONTAINER_CHECK: Template = node_template!("container.check.sh");
pub const CONTAINER_APPLY: Template = node_template!("container.apply.sh");
pub const RUNTIME_CHECK: Template = node_template!("runtime.check.sh");
pub const RUNTIME_APPLY: Template = node_template!("runtime.apply.sh");

// What the scripts and the cluster's files are made of.
pub const LIB: Template = node_template!("lib.sh");
pub const HOSTFILE: Template = node_template!("hostfile");
pub const GANESHA_CONF: Template = node_template!("ganesha.conf");
pub const CLOUD_CONFIG: Template = node_template!("cloud-config.yaml");
pub const DISCOVER_HOSTS: Template = node_template!("discover_hosts.sh");
pub const IMAGE_BUILD: Template = node_template!("image_build.sh");

/// The runtime a user's image gets from outside (runtime.apply.sh writes these into it): each
/// file's name in the runtime folder, and its template.
pub const RUNTIME_FILES: &[(&str, Template)] = &[
    ("entry.sh", node_template!("runtime-entry.sh")),
    ("sshd_config", node_template!("runtime-sshd_config")),
    ("ssh_config", node_template!("runtime-ssh_config")),
    (
        "jupyter_server_config.py",
        node_template!("runtime-jupyter_config.py"),
    ),
];

/// Every tera template, for the renderer.
pub const ALL: &[Template] = &[
    CLOUD_INIT_CHECK,
    DATA_DISK_CHECK,
    DATA_DISK_APPLY,
    DOCKER_CHECK,
    DOCKER_APPLY,
    GPU_CHECK,
    GPU_APPLY,
    SHARED_CHECK,
    SHARED_APPLY,
    CONTAINER_CHECK,
    CONTAINER_APPLY,
    RUNTIME_CHECK,
    RUNTIME_APPLY,
    RUNTIME_FILES[0].1,
    RUNTIME_FILES[1].1,
    RUNTIME_FILES[2].1,
    RUNTIME_FILES[3].1,
    LIB,
    HOSTFILE,
    GANESHA_CONF,
    CLOUD_CONFIG,
    DISCOVER_HOSTS,
    IMAGE_BUILD,
];

/// The text of a shipped template (hashed into what depends on it).
pub fn source(name: &str) -> Option<&'static str> {
    ALL.iter().find(|t| t.name == name).map(|t| t.text)
}

/// The master's one-shot image server and the workers' fetcher (arguments on the command line).
pub const IMAGE_SERVE: &str = include_str!("../templates/node/image_serve.py");
pub const IMAGE_FETCH: &str = include_str!("../templates/node/image_fetch.py");
pub const IMAGE_MIRROR: &str = include_str!("../templates/node/image_mirror.py");

/// The master's autostop agent (arguments: its config file).
pub const AUTOSTOP_AGENT: &str = include_str!("../templates/node/autostop_agent.py");

/// The master's job runner (`run`, `jobs`, `logs`, `cancel`; arguments on the command line).
pub const JOB_RUNNER: &str = include_str!("../templates/node/job_runner.sh");

/// The master's end of `push` and `pull` (its verb on the command line, the rest on stdin).
pub const TREE_SYNC: &str = include_str!("../templates/node/tree_sync.py");

/// The master's end of `[[data]] object_store` (src/transfer/objects.rs): sent with each call.
pub const OBJECT_FETCH: &str = include_str!("../templates/node/object_fetch.py");

/// The node's end of `bake`: sets aside what belongs to the cluster or the boot, and restores it.
pub const BAKE_SCRIPT: &str = include_str!("../templates/node/bake.sh");

/// The acceptance check job, run by every rank.
pub const CHECK_JOB: &str = include_str!("../templates/check/hvd_check.py");

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in `templates/node/` is named here, once: a template added to the folder
    /// but not to the table would never reach a node.
    #[test]
    fn the_table_names_every_node_template_once() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/node");
        let mut on_disk: Vec<String> = std::fs::read_dir(&folder)
            .expect("templates/node")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let mut named: Vec<String> = ALL.iter().map(|t| t.name.to_string()).collect();
        named.extend([
            "image_serve.py".to_string(),
            "image_fetch.py".to_string(),
            "image_mirror.py".to_string(),
            "autostop_agent.py".to_string(),
            "job_runner.sh".to_string(),
            "tree_sync.py".to_string(),
            "object_fetch.py".to_string(),
            "bake.sh".to_string(),
        ]);
        named.sort();
        let before = named.len();
        named.dedup();
        assert_eq!(named.len(), before, "a template is named twice");
        assert_eq!(named, on_disk);
        assert_eq!(source("lib.sh"), Some(LIB.text));
        assert_eq!(source("nothing.sh"), None);
    }
}
