use super::*;

#[test]
fn steps_run_in_order_and_their_templates_reach_the_renderer() {
    let names: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "cloud-init",
            "data disk",
            "docker",
            "gpu runtime",
            "shared",
            "image",
            "keys and files",
            "runtime",
            "container",
            "collective ssh"
        ]
    );
    // every step's scripts are in the renderer's table
    for step in STEPS {
        let named = match step.does {
            Does::Run(t) => vec![t],
            Does::CheckApply { check, apply, .. } => vec![check, apply],
            Does::Files | Does::Image | Does::CollectiveSsh => vec![],
        };
        for t in named {
            assert!(templates::ALL.contains(&t), "{}", t.name);
        }
    }
    let r = Renderer::new().unwrap();
    assert!(r
        .render("cloud-init.check.sh", &json!({}))
        .unwrap()
        .contains("cloud-init"));
}

/// A user's image: the runtime's files reach the node intact (base64 through the apply
/// script), every script is valid shell (the entry script POSIX sh: the image's /bin/sh may
/// be dash or busybox), and the container runs the entry script as root with the runtime
/// mounted, Jupyter's folder only on the master.
#[test]
fn a_users_image_gets_the_runtime_from_outside() {
    use base64::Engine as _;
    let r = Renderer::new().unwrap();
    let v = runtime_files(&r, 2222).unwrap();
    let files = v["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "entry.sh",
            "sshd_config",
            "ssh_config",
            "jupyter_server_config.py"
        ]
    );
    let decoded = |name: &str| {
        let f = files.iter().find(|f| f["name"] == name).unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(f["b64"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert!(decoded("ssh_config").contains("Port 2222\n"));
    assert!(decoded("sshd_config").contains("AuthorizedKeysFile /etc/hvd-cluster/ssh/"));
    // another port is another runtime (the stamp, and so the containers, follow)
    assert_ne!(
        runtime_files(&r, 2223).unwrap()["files_hash"],
        v["files_hash"]
    );
    let apply = r.script("runtime.apply.sh", &v).unwrap();
    let check = r.script("runtime.check.sh", &v).unwrap();
    assert!(apply.contains("hvd_runtime_stamp ") && check.contains(RUNTIME_DIR));
    let container = |role: &str, runtime: &str| {
        let values = json!({"role": role, "gpus": 0, "config_hash": "abc", "ssh_port": 2222,
            "image": "registry.example:5000/team/hvd:1", "hosts": [], "runtime": runtime,
            "kit_dir": RUNTIME_DIR});
        (
            r.render("container.apply.sh", &values).unwrap(),
            r.render("container.check.sh", &values).unwrap(),
        )
    };
    let (master, master_check) = container("master", "tool");
    assert!(master.contains("--user 0 --entrypoint /bin/sh"), "{master}");
    assert!(
        master.contains("\"$image\" \"$kit/entry.sh\" >/dev/null"),
        "{master}"
    );
    assert!(
        master.contains(
            "-e HVD_JUPYTER=1 -e JUPYTER_CONFIG_PATH=/etc/hvd-cluster/jupyter/config $user_base"
        ),
        "{master}"
    );
    assert_eq!(
        JUPYTER_CONFIG, "jupyter/config",
        "the template names the folder write_jupyter_tls fills"
    );
    assert!(master.contains("--install-jupyter"), "{master}");
    assert!(
        master_check.contains("hvd-cluster.runtime"),
        "{master_check}"
    );
    let (worker, _) = container("worker", "tool");
    assert!(
        !worker.contains("HVD_JUPYTER") && !worker.contains("jupyter"),
        "{worker}"
    );
    let (ours, ours_check) = container("master", "image");
    assert!(!ours.contains("entry.sh") && !ours_check.contains("hvd-cluster.runtime"));
    let shell_ok = |shell: &str, text: &str| {
        let mut child = std::process::Command::new(shell)
            .arg("-n")
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{shell}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for text in [&apply, &check, &master, &master_check, &worker, &ours] {
        shell_ok("bash", text);
    }
    shell_ok("sh", &decoded("entry.sh"));
}

#[test]
fn only_images_we_do_not_make_get_the_tools_runtime() {
    assert_eq!(
        images::runtime_for(images::HOROVOD_IMAGE),
        ContainerRuntime::Image
    );
    assert_eq!(
        images::runtime_for("198.18.0.1:5443/hvd-test/horovod:tf2.12.1-hvd0.28.1"),
        ContainerRuntime::Tool
    );
    assert_eq!(
        images::runtime_for("horovod/horovod:latest"),
        ContainerRuntime::Tool
    );
}

/// The data-disk step: only on a node whose flavor has an ephemeral disk, its size in the
/// scripts, and valid shell.
#[test]
fn the_data_disk_step_is_for_nodes_with_an_ephemeral_disk() {
    let step = STEPS.iter().find(|s| s.name == "data disk").unwrap();
    let p = crate::profile::parse(
        std::path::Path::new("t.toml"),
        "name = \"t\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 1\n",
    )
    .unwrap();
    let node = |ephemeral_gb| Node {
        name: "t-worker-1".into(),
        ephemeral_gb,
        ..Node::default()
    };
    assert!(!(step.when)(&p, &node(0)));
    assert!((step.when)(&p, &node(40)));
    let Does::CheckApply { check, apply, lib } = step.does else {
        panic!("a check and an apply");
    };
    assert!(lib, "it uses hvd_systemd");
    let r = Renderer::new().unwrap();
    let values = json!({"ephemeral_gb": 40});
    let apply = r.render(apply.name, &values).unwrap();
    assert!(apply.contains("$(( 40 * 1024 * 1024 * 1024 ))"), "{apply}");
    assert!(apply.contains("echo \"hvd-note: Docker's data and /var/tmp are on the flavor's 40 GB ephemeral disk ($dev)\""));
    // /var/tmp is bound at each bootstrap, never from fstab: a boot with a blank disk (after
    // `start`) would fail basic.target and every service with a private /var/tmp (seen on the
    // VMs: logind and resolved down, no DNS)
    let fstab = apply
        .split("<<FSTAB\n")
        .nth(1)
        .and_then(|rest| rest.split("\nFSTAB").next())
        .expect("the fstab lines");
    assert!(!fstab.contains("/var/tmp"), "{fstab}");
    assert!(fstab.contains("x-systemd.device-timeout=30s"), "{fstab}");
    assert!(
        apply.contains("mount --bind \"$data/tmp\" /var/tmp"),
        "{apply}"
    );
    let check = r.render(check.name, &values).unwrap();
    for text in [&apply, &check] {
        assert_eq!(crate::render::bash_syntax_error(text), None);
    }
}
