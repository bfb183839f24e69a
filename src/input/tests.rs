#[test]
fn cidrs_and_nfs_exports_are_checked_before_they_reach_a_file() {
    for ok in ["10.42.0.0/24", "0.0.0.0/0", "fd00::/64", "203.0.113.5/32"] {
        assert!(check_cidr(ok).is_ok(), "{ok}");
    }
    for bad in [
        "10.42.0.0",
        "10.42.0.0/33",
        "10.0.0.0/24(rw)",
        "10.0.0.0/24 *",
        "x/24",
        "10.0.0.0/+8",
        "fd00::/129",
        "",
    ] {
        assert!(check_cidr(bad).is_err(), "{bad:?}");
    }
    for ok in [
        "10.0.0.5:/shares/share-1a2b",
        "[fd00::5]:/path",
        "nfs.example.org:/vol/x_y-1",
        "Manila-1:/a",
    ] {
        assert!(check_nfs_export(ok).is_ok(), "{ok}");
    }
    for bad in [
        "10.0.0.5:/a b",
        "10.0.0.5:relative",
        "10.0.0.5:/a\nx",
        ":/a",
        "/a",
        "h:/a#c",
        "h;id:/a",
        "h:/$(id)",
        "[zz]:/a",
        "10.0.0.5:/a'b",
        "-o:/x",
    ] {
        assert!(check_nfs_export(bad).is_err(), "{bad:?}");
    }
}
use super::*;

#[test]
fn shown_shortens_and_escapes() {
    assert_eq!(shown("demo"), "demo");
    assert_eq!(shown("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
    assert_eq!(shown("it's \"x\""), "it's \"x\"");
    let huge = "a".repeat(5 * 1024 * 1024);
    let s = shown(&huge);
    assert!(s.len() < 100, "{s}");
    assert!(s.ends_with("… (5242880 bytes)"), "{s}");
    // Right-to-left override and zero-width characters are made visible.
    assert_eq!(shown("a\u{202e}b\u{200b}"), "a\\u{202e}b\\u{200b}");
}

#[test]
fn shown_message_keeps_both_ends() {
    let m = format!(
        "invalid type: string \"{}\", expected u32",
        "x".repeat(10_000)
    );
    let s = shown_message(&m, 200);
    assert!(s.chars().count() <= 201, "{s}");
    assert!(s.starts_with("invalid type"), "{s}");
    assert!(s.ends_with("expected u32"), "{s}");
    assert_eq!(shown_message("a\nb", 200), "a\\nb");
}

#[test]
fn cluster_names() {
    for ok in ["demo", "a", "a1-b2", &"a".repeat(40)] {
        assert!(ClusterName::parse(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        ".",
        "..",
        "/tmp/x",
        "a/../b",
        "../a",
        "a/b",
        "-rf",
        "a-",
        "Demo",
        "1abc",
        "a b",
        "a;b",
        "$(touch /tmp/x)",
        "a`id`",
        "a\nb",
        "a\u{1b}[31m",
        "dеmo", // Cyrillic е
        "ｄemo",
        "a_b",
        "a.b",
        &"a".repeat(41),
    ] {
        let e = ClusterName::parse(bad).unwrap_err().to_string();
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e:?}");
    }
    let huge = format!("a{}", "b".repeat(5 * 1024 * 1024));
    assert!(ClusterName::parse(&huge).unwrap_err().0.len() < 200);
}

#[test]
fn longest_name_fits_host_names_and_tags() {
    let name = "a".repeat(CLUSTER_NAME_MAX);
    let worker = crate::plan::Names(&name).worker(u32::MAX);
    assert!(worker.len() <= 63, "{worker}");
    assert!(crate::provider::openstack::tag(&name).len() <= 60);
}

#[test]
fn image_references() {
    for ok in [
        "hvd-cluster/horovod:tf2.12.1-hvd0.28.1",
        "horovod/horovod:0.28.1",
        "ubuntu",
        "registry.example.org:5000/team/img:v1",
        "localhost/img",
        "localhost:5000/a__b/c---d:latest",
        "[::1]:5000/img:1",
        "img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "img:1@sha256:0123456789abcdef0123456789abcdef",
    ] {
        assert!(
            check_image_reference(ok).is_ok(),
            "{ok}: {:?}",
            check_image_reference(ok)
        );
    }
    for bad in [
        "",
        "img; touch /tmp/x",
        "img$(touch /tmp/x)",
        "img`id`",
        "--privileged",
        "-v/:/host",
        "Img",
        "img:",
        "img:-x",
        "img name",
        "img\nrm",
        "a/{{ x }}",
        "img@sha256:short",
        "a//b",
        "a/-b",
        "a/b_",
        "a...b",
        "a___b",
        "http://x/y",
        "'img'",
    ] {
        assert!(check_image_reference(bad).is_err(), "{bad:?} passed");
    }
}

#[test]
fn login_and_interface_names() {
    assert!(check_login_name("debian").is_ok());
    assert!(check_login_name("_svc-1").is_ok());
    for bad in [
        "",
        "-oProxyCommand=x",
        "root;id",
        "Debian",
        "a b",
        &"a".repeat(33),
    ] {
        assert!(check_login_name(bad).is_err(), "{bad}");
    }
    for ok in [
        "eth0",
        "ens3",
        "enp0s31f6",
        "br-1a2b",
        "eth0.100",
        "veth@if5",
    ] {
        assert!(check_interface_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "eth0;id",
        "a b",
        "-x",
        "..",
        "averyveryverylongname",
        "e/0",
    ] {
        assert!(check_interface_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn host_labels() {
    for ok in ["c-master", "demo-worker-12", &"a".repeat(63)] {
        assert!(check_host_label(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "-x",
        "x-",
        "C-master",
        "a b",
        "a\nHost *",
        "a:1",
        "a.b",
        "a\"b",
        &"a".repeat(64),
    ] {
        assert!(check_host_label(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn subnet_rules() {
    let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    assert!(subnet_range_problem(a("0.0.0.0"), 0).is_some());
    assert!(subnet_range_problem(a("127.0.0.0"), 8).is_some());
    assert!(subnet_range_problem(a("169.254.0.0"), 16).is_some());
    assert!(subnet_range_problem(a("224.0.0.0"), 8).is_some());
    assert!(subnet_range_problem(a("10.42.0.0"), 24).is_none());
    assert_eq!(subnet_server_capacity(24), 252);
    assert_eq!(subnet_server_capacity(30), 0);
    assert_eq!(subnet_server_capacity(32), 0);
}

#[test]
fn apt_mirrors_are_plain_http_urls() {
    for ok in [
        "http://deb.debian.org/debian",
        "https://mirror.example.org:8443/debian/",
        "http://10.0.0.1/debian~local_1",
        "http://apt-cache",
    ] {
        assert!(check_apt_mirror(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "deb.debian.org/debian",
        "ftp://deb.debian.org/debian",
        "http://",
        "http://-x/debian",
        "http://host:0/debian",
        "http://host:99999/",
        "http://host/debian|rm -rf /",
        "http://host/deb ian",
        "http://host/$(id)",
        "http://host/a&b",
        "http://host/../../etc",
        "http://user@host/debian",
        "http://host/debian\nURIs: http://evil",
    ] {
        let e = check_apt_mirror(bad).expect_err(bad);
        assert!(e.0.contains("not a Debian mirror URL"), "{}", e.0);
        assert!(!e.0.contains('\n'), "shown escaped: {}", e.0);
    }
}

#[test]
fn cpu_shares_are_plain_decimals_within_the_machine() {
    for (ok, millis, shown_back) in [
        ("0.25", 250, "0.25"),
        ("1", 1000, "1"),
        ("1.5", 1500, "1.5"),
        ("0.01", 10, "0.01"),
        ("0.125", 125, "0.125"),
        ("2", 2000, "2"),
        ("2.000", 2000, "2"),
        ("007", 7000, "7"),
    ] {
        let share = CpuShare::parse(ok, 8).expect(ok);
        assert_eq!(share.millis(), millis, "{ok}");
        assert_eq!(share.to_string(), shown_back, "{ok}");
    }
    let huge = "9".repeat(5000);
    for bad in [
        "",
        "-1",
        "+1",
        "0",
        "0.0",
        "0.009",
        "abc",
        "1e3",
        "0x1",
        "inf",
        "NaN",
        ".5",
        "1.",
        "1.5.5",
        "1,5",
        " 1",
        "1 ",
        "0.2500",
        "0.25; rm -rf /",
        "$(id)",
        "1\n--privileged",
        "\u{1b}[31m1",
        "١",
        "9",
        "1000",
        "18446744073709551617",
        huge.as_str(),
    ] {
        let e = CpuShare::parse(bad, 8).expect_err(bad);
        assert!(e.0.contains("is not a CPU share"), "{bad}: {}", e.0);
        assert!(!e.0.contains('\n') && !e.0.contains('\u{1b}'), "{}", e.0);
        assert!(e.0.len() < 200, "{} bytes", e.0.len());
    }
    // the machine's count is the most one node may have
    assert!(CpuShare::parse("2", 2).is_ok());
    let e = CpuShare::parse("2.001", 2).unwrap_err();
    assert!(e.0.contains("this machine has 2 CPU(s)"), "{}", e.0);
    assert!(CpuShare::parse("0.5", 0).is_err());
}
