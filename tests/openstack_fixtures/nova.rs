//! Nova: flavors, keypairs, servers of every shape, the create body, limits and versions.

use super::*;

#[test]
fn nova_flavors_and_keypairs() {
    let flavors: Vec<Flavor> = at(&fixture("nova/flavors-detail-resp.json"), "flavors");
    assert_eq!(flavors.len(), 7);
    let small = flavors.iter().find(|f| f.name == "m1.small");
    assert!(
        matches!(small, Some(f) if f.id == "2" && f.ram == 2048 && f.disk == 20 && f.vcpus == 1)
    );
    let specs = flavors
        .iter()
        .find(|f| f.name == "m1.small.description")
        .map(|f| f.extra_specs.clone());
    assert_eq!(
        specs
            .and_then(|s| s.get("hw:cpu_policy").cloned())
            .as_deref(),
        Some("shared")
    );

    let f: Flavor = at(&fixture("nova/flavor-get-resp.v2.102.json"), "flavor");
    assert_eq!(
        (f.id.as_str(), f.is_public, f.extra_specs.len()),
        ("7", Some(true), 2)
    );

    let k: Keypair = at(
        &fixture("nova/keypairs-import-post-resp.v2.92.json"),
        "keypair",
    );
    assert_eq!(
        k.fingerprint.as_deref(),
        Some("1e:2c:9b:56:79:4b:45:77:f9:ca:7a:98:2c:b0:d5:3c")
    );
    assert!(k.public_key.starts_with("ssh-rsa "));
    let req = fixture("nova/keypairs-import-post-req.v2.92.json");
    assert_eq!(req["keypair"]["type"], "ssh");
    let list = fixture("nova/keypairs-list-resp.v2.35.json");
    let first: Keypair =
        serde_json::from_value(list["keypairs"][0]["keypair"].clone()).unwrap_or_default();
    assert_eq!(first.name, "keypair-5d935425-31d5-48a7-a0f1-e76e9813f2c3");
    assert!(http::next_page_query(&list, "keypairs").is_some());
}

#[test]
fn nova_servers_every_shape() {
    let s: Server = at(&fixture("nova/server-get-resp.json"), "server");
    assert_eq!(s.status, ServerStatus::Active);
    assert_eq!(s.power_state, Some(PowerState::Running));
    assert_eq!(s.flavor.as_ref().and_then(|f| f.id.as_deref()), Some("1"));
    assert_eq!(
        s.image_id.as_deref(),
        Some("70a599e0-31e7-49b7-b260-868f441e862b")
    );
    assert_eq!(s.addresses_of_kind("fixed"), vec!["192.168.1.30"]);
    assert_eq!(
        s.metadata.get("My Server Name").map(String::as_str),
        Some("Apache1")
    );
    assert_eq!(s.security_groups[0].name, "default");

    let s: Server = at(&fixture("nova/server-get-resp.v2.100.json"), "server");
    let f = s.flavor.clone().unwrap_or_default();
    assert_eq!(
        (f.id, f.original_name.as_deref(), f.vcpus),
        (None, Some("m1.tiny"), Some(1))
    );
    assert_eq!(s.hostname.as_deref(), Some("new-server-test"));
    assert!(s.tags.is_empty() && s.fault.is_none());
    assert_eq!(s.availability_zone.as_deref(), Some("us-west"));
    let attached: Vec<(&str, bool)> = s
        .volumes_attached
        .iter()
        .map(|v| (v.id.as_str(), v.delete_on_termination))
        .collect();
    assert_eq!(attached, [("volume_id1", false), ("volume_id2", false)]);

    // down cell: nearly everything missing
    let s: Server = at(
        &fixture("nova/server-get-down-cell-resp.v2.71.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Unknown);
    assert_eq!(s.name, None);
    assert!(s.addresses.is_empty() && s.metadata.is_empty() && s.key_name.is_none());
    assert_eq!(s.power_state, Some(PowerState::NoState));

    let s: Server = at(
        &fixture("nova/server-get-error-fault.faults-rst.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Error);
    let fault = s.fault.clone().unwrap_or_default();
    assert_eq!(fault.code, Some(500));
    assert!(fault.message.starts_with("No valid host was found"));

    let s: Server = at(
        &fixture("nova/server-get-fault-error.gophercloud.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Active);
    assert!(s
        .fault
        .is_some_and(|f| f.details.as_deref() == Some("Stock details for test")));
    assert_eq!(s.key_name, None);

    let detail = fixture("nova/servers-details-resp.v2.100.json");
    let servers: Vec<Server> = at(&detail, "servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].status, ServerStatus::Active);
    let next = http::next_page_query(&detail, "servers").unwrap_or_default();
    assert!(
        next.contains(&(
            "marker".into(),
            "f5dc173b-6804-445a-a6d8-c705dad5b5eb".into()
        )),
        "{next:?}"
    );

    let brief: Vec<Server> = at(&fixture("nova/servers-list-resp.v2.100.json"), "servers");
    assert_eq!(brief[0].name.as_deref(), Some("new-server-test"));

    let created: Server = at(&fixture("nova/server-create-resp.json"), "server");
    assert_eq!(created.id, "f5dc173b-6804-445a-a6d8-c705dad5b5eb");
    let created: Server = at(&fixture("nova/server-create-resp.v2.100.json"), "server");
    assert_eq!(created.id, "f5dc173b-6804-445a-a6d8-c705dad5b5eb");

    let meta = fixture("nova/server-metadata-all-resp.json");
    let m: BTreeMap<String, String> = at(&meta, "metadata");
    assert_eq!(m.get("foo").map(String::as_str), Some("Foo Value"));
    let tags: Vec<String> = at(&fixture("nova/server-tags-index-resp.v2.26.json"), "tags");
    assert_eq!(
        tags,
        fixture("nova/server-tags-put-all-req.v2.26.json")["tags"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect::<Vec<_>>())
            .unwrap_or_default()
    );
}

#[test]
fn nova_server_create_body_matches_the_sample() -> TestResult {
    for file in [
        "nova/server-create-req.json",
        "nova/server-create-req.v2.94.json",
    ] {
        let sample = fixture(file);
        let s = &sample["server"];
        use base64::Engine;
        let user_data = base64::engine::general_purpose::STANDARD
            .decode(s["user_data"].as_str().unwrap_or_default())?;
        let create = ServerCreate {
            name: "new-server-test".into(),
            flavor_id: "1".into(),
            image_id: "70a599e0-31e7-49b7-b260-868f441e862b".into(),
            availability_zone: Some("us-west".into()),
            metadata: [("My Server Name".to_string(), "Apache1".to_string())].into(),
            security_groups: vec!["default".into()],
            user_data: Some(user_data),
            hostname: s
                .get("hostname")
                .and_then(|h| h.as_str())
                .map(str::to_owned),
            ..ServerCreate::default()
        };
        let body = create.to_body()?;
        let ours = &body["server"];
        for key in [
            "name",
            "imageRef",
            "flavorRef",
            "availability_zone",
            "metadata",
            "security_groups",
            "user_data",
            "hostname",
        ] {
            assert_eq!(ours.get(key), s.get(key), "{file}: {key}");
        }
        assert_eq!(ours["networks"], "none");
    }
    let body = ServerCreate {
        name: "c-worker-1".into(),
        flavor_id: "f".into(),
        image_id: "i".into(),
        networks: vec![
            ServerNetwork::Port("p1".into()),
            ServerNetwork::Network("n1".into()),
        ],
        key_name: Some("c-key".into()),
        tags: vec!["hvd-cluster".into(), "c".into()],
        ..ServerCreate::default()
    }
    .to_body()?;
    assert_eq!(
        body["server"]["networks"],
        json!([{"port": "p1"}, {"uuid": "n1"}])
    );
    assert_eq!(body["server"]["tags"], json!(["hvd-cluster", "c"]));
    assert_eq!(body["server"]["key_name"], "c-key");
    assert!(body["server"].get("security_groups").is_none());
    let too_big = ServerCreate {
        user_data: Some(vec![b'x'; 60_000]),
        ..ServerCreate::default()
    };
    assert!(matches!(too_big.to_body(), Err(OpenStackError::Invalid(m)) if m.contains("65535")));
    Ok(())
}

/// A volume-backed server: the mapping of Nova's own sample (source image, destination
/// volume, boot index 0, size, type), deleted with the server, and no imageRef beside it.
#[test]
fn nova_boot_from_volume_body_matches_the_sample() -> TestResult {
    let sample = fixture("nova/server-create-req.v2.67.json");
    let want = &sample["server"]["block_device_mapping_v2"][0];
    let body = ServerCreate {
        name: "bfv-server-with-volume-type".into(),
        flavor_id: "1".into(),
        image_id: "70a599e0-31e7-49b7-b260-868f441e862b".into(),
        boot_volume: Some(BootVolume {
            size_gb: 1,
            volume_type: Some("lvm-1".into()),
        }),
        ..ServerCreate::default()
    }
    .to_body()?;
    let server = &body["server"];
    assert!(server.get("imageRef").is_none(), "{server}");
    assert!(sample["server"].get("imageRef").is_none());
    let ours = &server["block_device_mapping_v2"][0];
    for key in [
        "uuid",
        "source_type",
        "destination_type",
        "boot_index",
        "volume_type",
    ] {
        assert_eq!(ours[key], want[key], "{key}");
    }
    assert_eq!(
        ours["volume_size"].to_string(),
        want["volume_size"].as_str().unwrap_or_default(),
        "volume_size"
    );
    assert_eq!(ours["delete_on_termination"], true);
    assert_eq!(
        server["block_device_mapping_v2"].as_array().map(Vec::len),
        Some(1)
    );
    // Without a type the cloud's default is used: no key at all.
    let body = ServerCreate {
        image_id: "i".into(),
        boot_volume: Some(BootVolume {
            size_gb: 40,
            volume_type: None,
        }),
        ..ServerCreate::default()
    }
    .to_body()?;
    let ours = &body["server"]["block_device_mapping_v2"][0];
    assert!(ours.get("volume_type").is_none(), "{ours}");
    assert_eq!(ours["volume_size"], 40);
    Ok(())
}

#[test]
fn nova_limits_quotas_versions() {
    let l: ComputeLimits = serde_json::from_value(
        fixture("nova/limits-get-resp.v2.57.json")["limits"]["absolute"].clone(),
    )
    .unwrap_or_default();
    assert_eq!(
        (
            l.max_total_instances,
            l.total_instances_used,
            l.max_total_ram_size
        ),
        (10, 0, 51200)
    );
    let q = quota_usages_from_json(
        &fixture("nova/quotas-show-detail-get-resp.v2.57.json"),
        "quota_set",
    )
    .unwrap_or_default();
    assert_eq!(q.len(), 7);
    assert_eq!(
        q.get("instances")
            .map(|u| (u.limit, u.in_use, u.available())),
        Some((10, 0, Some(10)))
    );
    // the non-detail form has no usage objects
    let q = quota_usages_from_json(
        &fixture("nova/quotas-show-get-resp.v2.57.json"),
        "quota_set",
    )
    .unwrap_or_default();
    assert!(q.is_empty());
    // the pinned microversion is inside the range nova advertises
    let max = |v: &Value| -> (u32, u32) {
        let s = v["version"].as_str().unwrap_or("0.0");
        let (a, b) = s.split_once('.').unwrap_or(("0", "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    let ours = {
        let (a, b) = service::NOVA_MICROVERSION
            .split_once('.')
            .unwrap_or(("0", "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    let v21 = fixture("nova/v21-version-get-resp.json");
    assert!(ours >= (2, 74) && ours <= max(&v21["version"]));
    let all = fixture("nova/versions-get-resp.json");
    assert!(all["versions"]
        .as_array()
        .is_some_and(|vs| vs.iter().any(|v| v["id"] == "v2.1" && ours <= max(v))));
}
