use super::*;

const GOOD: &str = r#"
name = "demo"
cloud = "local-user"

[master]
flavor = "m1.small"
image = "debian-12-genericcloud-amd64"

[workers]
count = 3
flavor = "g1.a100"

[network]
cidr = "10.42.0.0/24"
external_network = "public"

[floating_ip]
pool = "public"

[access]
allowed_cidrs = ["203.0.113.0/24"]

[storage]
kind = "manila"
size_gb = 10
"#;

fn parse_str(text: &str) -> Result<Profile, ProfileError> {
    parse(Path::new("p.toml"), text)
}

#[test]
fn good_profile_parses_with_defaults() {
    let p = parse_str(GOOD).unwrap();
    assert_eq!(p.name, "demo");
    assert_eq!(p.provider, ProviderKind::OpenStack);
    assert_eq!(p.workers.count, 3);
    assert_eq!(p.worker_image(), Some("debian-12-genericcloud-amd64"));
    assert_eq!(p.ssh_user, "debian");
    assert_eq!(p.container.ssh_port, 12345);
    assert_eq!(p.storage.kind, StorageKind::Manila);
    assert_eq!(p.access.jupyter, JupyterAccess::Tunnel);
    assert!(p.creates_network());
}

#[test]
fn unknown_key_names_line_field_and_suggestion() {
    let text = GOOD.replace("flavor = \"g1.a100\"", "flavour = \"g1.a100\"");
    let e = parse_str(&text).unwrap_err();
    assert_eq!(e.line, Some(11), "{e}");
    assert_eq!(e.field, "workers.flavour");
    assert_eq!(e.help.as_deref(), Some("did you mean `flavor`?"));
    let shown = e.to_string();
    assert!(
        shown.starts_with("p.toml:11:1: `workers.flavour`: unknown field"),
        "{shown}"
    );
}

#[test]
fn unknown_top_level_table_is_suggested() {
    let text = GOOD.replace("[floating_ip]", "[floatingip]");
    let e = parse_str(&text).unwrap_err();
    assert_eq!(
        e.help.as_deref(),
        Some("did you mean `floating_ip`?"),
        "{e}"
    );
}

#[test]
fn wrong_type_points_at_the_value() {
    let text = GOOD.replace("count = 3", "count = \"three\"");
    let e = parse_str(&text).unwrap_err();
    assert_eq!(e.line, Some(10));
    assert_eq!(e.field, "workers.count");
    assert!(e.message.contains("invalid type"), "{e}");
}

#[test]
fn open_to_the_world_needs_to_be_explicit() {
    let text = GOOD.replace("203.0.113.0/24", "0.0.0.0/0");
    let e = parse_str(&text).unwrap_err();
    assert_eq!(e.field, "access.allowed_cidrs");
    assert_eq!(e.line, Some(21));
    let ok = text.replace("[access]", "[access]\nopen_to_internet = true");
    assert!(parse_str(&ok).is_ok());
}

#[test]
fn semantic_errors_name_the_field() {
    let cases = [
        (
            GOOD.replace("name = \"demo\"", "name = \"Demo_1\""),
            "name",
            Some(2),
        ),
        (
            GOOD.replace("10.42.0.0/24", "10.42.0.1/24"),
            "network.cidr",
            Some(14),
        ),
        (
            GOOD.replace("flavor = \"m1.small\"\n", ""),
            "master.flavor",
            None,
        ),
        (
            GOOD.replace("external_network = \"public\"\n", ""),
            "network.external_network",
            None,
        ),
        (
            GOOD.replace("allowed_cidrs = [\"203.0.113.0/24\"]", "allowed_cidrs = []"),
            "access.allowed_cidrs",
            Some(21),
        ),
        (
            GOOD.replace(
                "cidr = \"10.42.0.0/24\"",
                "existing = \"net\"\ncidr = \"10.0.0.0/8\"",
            ),
            "network.cidr",
            Some(15),
        ),
    ];
    for (text, field, line) in cases {
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert_eq!(e.line, line, "{e}");
    }
}

#[test]
fn missing_table_or_key_is_named_with_its_place() {
    let e = parse_str(&GOOD.replace("[master]", "[unused_master]")).unwrap_err();
    assert!(e.field.starts_with("unused_master"), "{e}");
    let text = "name = \"x\"\nprovider = \"local\"\n[workers]\ncount = 1\n";
    let e = parse_str(text).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.line, e.column),
        ("master", Some(1), Some(1)),
        "{e}"
    );
    let text = "name = \"x\"\nprovider = \"local\"\n[master]\n\n[workers]\nslots = 1\n";
    let e = parse_str(text).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.line),
        ("workers.count", Some(5)),
        "{e}"
    );
}

#[test]
fn shell_bearing_values_are_refused_with_their_field() {
    let local = "name = \"x\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
    let cases = [
        ("name", "name = \"x\"", "name = \"$(touch /tmp/x)\""),
        ("name", "name = \"x\"", "name = \"..\""),
        ("name", "name = \"x\"", "name = \"a/../b\""),
        ("ssh_user", "[master]", "ssh_user = \"root;id\"\n[master]"),
        (
            "ssh_user",
            "[master]",
            "ssh_user = \"-oProxyCommand=id\"\n[master]",
        ),
        ("interface", "[master]", "interface = \"publik\"\n[master]"),
        (
            "container.image",
            "count = 2",
            "count = 2\n[container]\nimage = \"img; touch /tmp/x\"",
        ),
        (
            "container.image",
            "count = 2",
            "count = 2\n[container]\nimage = \"--privileged\"",
        ),
        (
            "container.image",
            "count = 2",
            "count = 2\n[container]\nimage = \"img:{{ x }}\"",
        ),
        (
            "container.image",
            "count = 2",
            "count = 2\n[container]\nimage = \"$(id)\"",
        ),
        (
            "network.cidr",
            "count = 2",
            "count = 2\n[network]\ncidr = \"0.0.0.0/0\"",
        ),
        (
            "network.cidr",
            "count = 2",
            "count = 2\n[network]\ncidr = \"10.0.0.0/30\"",
        ),
        (
            "network.cidr",
            "count = 2",
            "count = 2\n[network]\ncidr = \"127.0.0.0/24\"",
        ),
    ];
    for (field, from, to) in cases {
        let e = parse_str(&local.replace(from, to)).unwrap_err();
        assert_eq!(e.field, field, "{to}: {e}");
        assert!(e.line.is_some() && e.column.is_some(), "{to}: {e}");
    }
    // A subnet just big enough: 2 workers + master + a replacement in a /29 (8 - 4).
    let ok = local.replace("count = 2", "count = 2\n[network]\ncidr = \"10.0.0.0/29\"");
    assert!(parse_str(&ok).is_ok());
    let openstack_small = GOOD.replace("10.42.0.0/24", "10.42.0.0/29");
    assert_eq!(
        parse_str(&openstack_small).unwrap_err().field,
        "network.cidr"
    );
}

#[test]
fn huge_and_control_values_come_back_short_and_escaped() {
    let huge = format!("a{}", "b".repeat(5 * 1024 * 1024));
    for text in [
        GOOD.replace("name = \"demo\"", &format!("name = \"{huge}\"")),
        GOOD.replace("count = 3", &format!("count = \"{huge}\"")),
        GOOD.replace("count = 3", &format!("count = 3\n{huge} = 1")),
        GOOD.replace("name = \"demo\"", "name = \"a\\nb\\u001b[31m\""),
    ] {
        let shown = parse_str(&text).unwrap_err().to_string();
        assert!(shown.len() < 700, "{} bytes", shown.len());
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
        assert_eq!(
            shown.lines().count(),
            shown.matches("help:").count() + 1,
            "{shown:?}"
        );
    }
}

#[test]
fn local_profile_needs_no_flavor() {
    let text = "name = \"local\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
    let p = parse_str(text).unwrap();
    assert_eq!(p.provider, ProviderKind::Local);
    assert_eq!(p.storage.kind, StorageKind::MasterNfs);
    // a local node's image is a bake's name (a Docker tag), nothing else
    let baked = text.replace("[workers]", "image = \"hvd-local-bake\"\n[workers]");
    assert!(parse_str(&baked).is_ok());
    let e = parse_str(&text.replace("[workers]\n", "[workers]\nimage = \"debian:12\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("workers.image") && e.contains("cannot name a bake"),
        "{e}"
    );
}

#[test]
fn syntax_error_has_a_place() {
    let e = parse_str("name = \"x\"\n[master\n").unwrap_err();
    assert_eq!(e.line, Some(2));
}

#[test]
fn worker_count_is_edited_in_place() {
    let text = "name = \"x\"\n[master]\n[workers]\ncount = 2   # two\nflavor = \"f\"\n";
    let edited = with_worker_count(text, 5).unwrap();
    assert_eq!(
        edited,
        "name = \"x\"\n[master]\n[workers]\ncount = 5  # two\nflavor = \"f\"\n"
    );
    assert!(with_worker_count("name = \"x\"\n", 1).is_none());
}

#[test]
fn cidr_parsing() {
    assert!(parse_cidr("10.0.0.0/8").is_ok());
    assert!(parse_cidr("10.0.0.0").is_err());
    assert!(parse_cidr("10.0.0.0/33").is_err());
    assert!(parse_cidr("300.0.0.0/8").is_err());
    assert_eq!(
        parse_cidr("10.0.0.5/24").unwrap_err(),
        "`10.0.0.5/24` has host bits set; the network is 10.0.0.0/24"
    );
}

#[test]
fn nearest_ignores_far_words() {
    assert_eq!(nearest("flavour", &["flavor", "image"]), Some("flavor"));
    assert_eq!(nearest("zzzzzz", &["flavor", "image"]), None);
}

/// `build-remote` builds only the recipe's own images: any other name is refused where the
/// profile is read, with the names it can build; the recipe's names parse.
#[test]
fn build_remote_names_one_of_the_recipe_images() {
    let with = |image: &str| {
        format!("{GOOD}\n[container]\nimage = \"{image}\"\nsource = \"build-remote\"\n")
    };
    for image in crate::images::RECIPE_IMAGES {
        let p = parse_str(&with(image)).unwrap();
        assert_eq!(p.container.source, ImageSource::BuildRemote);
    }
    let e = parse_str(&with("lab/horovod:latest")).unwrap_err();
    assert_eq!(e.field, "container.source", "{e}");
    assert!(e.to_string().contains("not `lab/horovod:latest`"), "{e}");
    assert!(
        e.help
            .as_deref()
            .is_some_and(|h| h.contains(crate::images::HOROVOD_IMAGE)),
        "{e:?}"
    );
    // the value's own spelling
    let e = parse_str(&GOOD.replace(
        "[storage]",
        "[container]\nsource = \"build_remote\"\n\n[storage]",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("build-remote"), "{e}");
    // only what the nodes run is built here for a local cluster; nothing for a cloud's
    let mut p = parse_str(&with(crate::images::HOROVOD_IMAGE)).unwrap();
    assert!(crate::provider::images_to_build(&p, false).is_empty());
    p.provider = ProviderKind::Local;
    assert_eq!(
        crate::provider::images_to_build(&p, false),
        ["base", "node"]
    );
    use ImageSource::{Build, Pull, Transfer}; // a user's own image: only what the nodes run
    for (source, built) in [(Pull, "base node"), (Transfer, "base node"), (Build, "all")] {
        p.container.source = source;
        assert_eq!(crate::provider::images_to_build(&p, false).join(" "), built);
    }
}

#[test]
fn lifecycle_autostop_and_urls_by_their_grammar() {
    let with = |lines: &str| parse_str(&format!("{GOOD}\n[lifecycle]\n{lines}\n"));
    let p = with("autostop = \"30m\"\nidentity_url = \"http://203.0.113.1:5000/v3\"").unwrap();
    assert_eq!(
        p.lifecycle.autostop_after(),
        Some(std::time::Duration::from_secs(1800))
    );
    assert!(!p.lifecycle.unrestricted_credential);
    assert_eq!(
        with("autostop = \"off\"")
            .unwrap()
            .lifecycle
            .autostop_after(),
        None
    );
    assert_eq!(parse_str(GOOD).unwrap().lifecycle.autostop_after(), None);
    for (line, field) in [
        ("autostop = \"30\"", "lifecycle.autostop"),
        ("autostop = \"10s\"", "lifecycle.autostop"),
        ("autostop = \"5m; reboot\"", "lifecycle.autostop"),
        (
            "identity_url = \"http://h:5000/v3?x=$(id)\"",
            "lifecycle.identity_url",
        ),
        (
            "compute_url = \"file:///etc/passwd\"",
            "lifecycle.compute_url",
        ),
        (
            "compute_url = \"http://user:pw@h/v2.1\"",
            "lifecycle.compute_url",
        ),
        (
            "compute_url = \"http://h/../v2.1\"",
            "lifecycle.compute_url",
        ),
    ] {
        let e = with(line).unwrap_err();
        assert_eq!(e.field, field, "{line}: {e}");
    }
    let e = with("autostp = \"30m\"").unwrap_err();
    assert_eq!(e.help.as_deref(), Some("did you mean `autostop`?"));
}

#[test]
fn autostop_needs_a_cloud() {
    let text = "name = \"demo\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 1\n[lifecycle]\nautostop = \"30m\"\n";
    let e = parse_str(text).unwrap_err();
    assert_eq!(e.field, "lifecycle.autostop");
    assert!(e.to_string().contains("needs an OpenStack cloud"), "{e}");
}

/// `root_volume_gb` and `volume_type`: a size Cinder can make, a printable type, OpenStack only.
#[test]
fn root_volumes_are_checked() {
    let ok = parse_str(&GOOD.replace(
        "count = 3",
        "count = 3\nroot_volume_gb = 200\nvolume_type = \"ssd\"",
    ))
    .unwrap();
    assert_eq!(ok.workers.root_volume_gb, Some(200));
    assert_eq!(ok.workers.volume_type.as_deref(), Some("ssd"));
    let cases = [
        (
            GOOD.replace("count = 3", "count = 3\nroot_volume_gb = 0"),
            "workers.root_volume_gb",
            "at least 1 GiB",
        ),
        (
            GOOD.replace(
                "image = \"debian-12-genericcloud-amd64\"",
                "image = \"debian-12-genericcloud-amd64\"\nroot_volume_gb = 100000",
            ),
            "master.root_volume_gb",
            "more than the 16384 GiB",
        ),
        (
            GOOD.replace("count = 3", "count = 3\nvolume_type = \"a\\nb\""),
            "workers.volume_type",
            "",
        ),
        (
            GOOD.replace(
                "count = 3",
                &format!("count = 3\nvolume_type = \"{}\"", "x".repeat(300)),
            ),
            "workers.volume_type",
            "",
        ),
        (
            format!(
                "provider = \"local\"\n{}",
                GOOD.replace("count = 3", "count = 3\nroot_volume_gb = 50")
            ),
            "workers.root_volume_gb",
            "needs the openstack provider",
        ),
    ];
    for (text, field, says) in cases {
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

/// `storage.keep`, `volume_gb` and `volume_type`: a volume to keep, a printable type, OpenStack
/// only.
#[test]
fn a_kept_shared_volume_is_checked() {
    let nfs = GOOD.replace("kind = \"manila\"\nsize_gb = 10", "kind = \"master-nfs\"");
    let ok = parse_str(&nfs.replace(
        "kind = \"master-nfs\"",
        "kind = \"master-nfs\"\nvolume_gb = 20\nvolume_type = \"ceph\"\nkeep = true",
    ))
    .unwrap();
    assert!(ok.storage.keep);
    assert_eq!(ok.storage.volume_type.as_deref(), Some("ceph"));
    let taken = parse_str(&nfs.replace(
        "kind = \"master-nfs\"",
        "kind = \"master-nfs\"\nvolume = \"datasets\"",
    ))
    .unwrap();
    assert_eq!(taken.storage.volume.as_deref(), Some("datasets"));
    let kept_share = parse_str(&GOOD.replace("size_gb = 10", "size_gb = 10\nkeep = true")).unwrap();
    assert!(kept_share.storage.keep, "a Manila share can be kept");
    let taken_share = parse_str(&GOOD.replace("size_gb = 10", "share = \"datasets\"")).unwrap();
    assert_eq!(taken_share.storage.share.as_deref(), Some("datasets"));
    let cases = [
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nvolume = \"datasets\"\nvolume_gb = 5",
            ),
            "storage.volume_gb",
            "names a volume that exists",
        ),
        (
            GOOD.replace("size_gb = 10", "size_gb = 10\nvolume = \"datasets\""),
            "storage.volume",
            "only used with kind = \"master-nfs\"",
        ),
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nvolume = \"x\\ny\"",
            ),
            "storage.volume",
            "",
        ),
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nkeep = true",
            ),
            "storage.keep",
            "no volume to keep",
        ),
        (
            GOOD.replace(
                "kind = \"manila\"\nsize_gb = 10",
                "kind = \"none\"\nkeep = true",
            ),
            "storage.keep",
            "no /shared to keep",
        ),
        (
            GOOD.replace("size_gb = 10", "size_gb = 10\nshare = \"datasets\""),
            "storage.size_gb",
            "names a share that exists",
        ),
        (
            GOOD.replace("size_gb = 10", "share = \"datasets\"\nkeep = true"),
            "storage.keep",
            "names a share that exists",
        ),
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nshare = \"datasets\"",
            ),
            "storage.share",
            "only used with kind = \"manila\"",
        ),
        (
            GOOD.replace("size_gb = 10", "share = \"a\\u001b[2Jb\""),
            "storage.share",
            "",
        ),
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nvolume_type = \"ceph\"",
            ),
            "storage.volume_type",
            "set storage.volume_gb too",
        ),
        (
            nfs.replace(
                "kind = \"master-nfs\"",
                "kind = \"master-nfs\"\nvolume_gb = 5\nvolume_type = \"a\\u0000b\"",
            ),
            "storage.volume_type",
            "",
        ),
        (
            format!(
                "provider = \"local\"\n{}",
                nfs.replace(
                    "kind = \"master-nfs\"",
                    "kind = \"master-nfs\"\nvolume_gb = 5"
                )
            ),
            "storage.volume_gb",
            "needs the openstack provider",
        ),
    ];
    for (text, field, says) in cases {
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn data_entries_land_below_shared_each_in_a_place_of_its_own() {
    let p = parse(
        Path::new("/home/u/proj/p.toml"),
        &format!(
            "{GOOD}\n[[data]]\nlocal = \"data/tiny-imagenet\"\nstage = true\n\n[[data]]\nlocal = \"/abs/code\"\nshared = \"/shared/project/code\"\n"
        ),
    )
    .unwrap();
    assert_eq!(p.data.len(), 2);
    assert_eq!(
        p.data[0].local.as_deref(),
        Some(Path::new("/home/u/proj/data/tiny-imagenet")),
        "relative to the profile's folder"
    );
    assert!(p.data[0].stage && !p.data[1].stage);
    assert_eq!(p.data[1].shared.as_deref(), Some("/shared/project/code"));
    for (entries, says) in [
        ("[[data]]\nlocal = \"x\"\nshared = \"/etc/x\"\n", "below /shared"),
        ("[[data]]\nlocal = \"x\"\nshared = \"/shared/../etc\"\n", "`..`"),
        ("[[data]]\nlocal = \"x\"\nshared = \"/shared\"\n", "not /shared itself"),
        ("[[data]]\nlocal = \"..\"\n", "names no folder or file of its own"),
        (
            "[[data]]\nlocal = \"a/ds\"\n\n[[data]]\nlocal = \"b/ds\"\n",
            "in or around data[0]'s /shared/ds",
        ),
        (
            "[[data]]\nlocal = \"a\"\n\n[[data]]\nlocal = \"b\"\nshared = \"/shared/a/inner\"\n",
            "in or around",
        ),
        (
            "[[data]]\nlocal = \"a/ds\"\nstage = true\n\n[[data]]\nlocal = \"b\"\nshared = \"/shared/x/ds\"\nstage = true\n",
            "both be staged as /staged/ds",
        ),
        ("[[data]]\nlocal = \"x\"\nonto = \"nodes\"\n", "onto"),
        ("[[data]]\nstage = true\n", "give `local` (a folder here) or `object_store`"),
        (
            "[[data]]\nlocal = \"x\"\nobject_store = \"ds\"\n",
            "not both",
        ),
        ("[[data]]\nobject_store = \"ds/../x\"\n", "data[0].object_store"),
        ("[[data]]\nobject_store = \"d*s\"\n", "only letters, digits"),
        (
            "[[data]]\nobject_store = \"ds/train\"\n\n[[data]]\nlocal = \"x/train\"\n",
            "in or around data[0]'s /shared/train",
        ),
    ] {
        let err = parse_str(&format!("{GOOD}\n{entries}")).unwrap_err().to_string();
        assert!(err.contains(says), "{entries:?}: {err}");
    }
}

#[test]
fn a_temporary_bake_is_one_server_of_the_workers_kind_and_reads_back() {
    let full = GOOD.replace(
        "flavor = \"g1.a100\"",
        "flavor = \"g1.a100\"\nimage = \"debian-12-gpu\"\nroot_volume_gb = 40",
    ) + "\n[lifecycle]\nautostop = \"2h\"\n\n[[data]]\nlocal = \"datasets/mnist\"\n\n\
           [container]\nimage = \"reg.example:5000/hvd:1\"\nsource = \"pull\"\n\
           registry_ca = \"ca.pem\"\n";
    let p = parse_str(&full).unwrap();
    let t = p
        .for_a_temporary_bake(Path::new("/home/u/profiles"))
        .unwrap();
    assert_eq!(t.name, "demo-baking");
    assert_eq!(t.master.flavor.as_deref(), Some("g1.a100"));
    assert_eq!(t.master.image.as_deref(), Some("debian-12-gpu"));
    assert_eq!(t.master.root_volume_gb, Some(40));
    assert_eq!(t.workers.count, 0);
    assert_eq!(t.storage.kind, StorageKind::None);
    assert!(t.data.is_empty());
    assert_eq!(t.lifecycle, LifecycleSpec::default());
    assert_eq!(
        t.container.registry_ca.as_deref(),
        Some("/home/u/profiles/ca.pem")
    );
    assert_eq!(t.container.image, p.container.image);
    // written and read back by the same parser: the same profile
    let text = t.to_toml().unwrap();
    assert_eq!(
        parse(Path::new("/state/demo-baking/profile.toml"), &text).unwrap(),
        t
    );

    // a name that leaves no room for the suffix: one line, before anything is made
    let long = GOOD.replace("name = \"demo\"", &format!("name = \"{}\"", "a".repeat(36)));
    let e = parse_str(&long)
        .unwrap()
        .for_a_temporary_bake(Path::new("/p"))
        .unwrap_err();
    assert!(
        e.0.contains("the temporary cluster's name") && e.0.contains("without --temporary"),
        "{}",
        e.0
    );
}
