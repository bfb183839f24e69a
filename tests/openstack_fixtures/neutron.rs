//! Neutron: parsers of every resource and the request bodies.

use super::*;

#[test]
fn neutron_parsers() {
    let nets: Vec<NetworkInfo> = at(&fixture("neutron/networks-list-response.json"), "networks");
    assert_eq!(nets.len(), 2);
    assert!(!nets[0].external && nets[0].subnets == ["54d6f61d-db07-451c-9ab3-b9609b6b6f0b"]);
    let n: NetworkInfo = at(&fixture("neutron/network-create-response.json"), "network");
    assert_eq!(
        (n.name.as_str(), n.mtu, n.tags.len()),
        ("net1", Some(1400), 1)
    );

    let s: Subnet = at(&fixture("neutron/subnet-create-response.json"), "subnet");
    assert_eq!(s.cidr, "192.168.199.0/24");
    assert_eq!(s.gateway_ip.as_deref(), Some("192.168.199.1"));
    assert_eq!(s.allocation_pools[0].start, "192.168.199.2");

    let r: Router = at(&fixture("neutron/router-create-response.json"), "router");
    let gw = r.external_gateway_info.clone().unwrap_or_default();
    assert_eq!(gw.network_id, "ae34051f-aa6c-4c75-abf5-50dc9ac99ef3");
    assert_eq!(
        gw.external_fixed_ips[0].ip_address.as_deref(),
        Some("172.24.4.6")
    );

    // not wrapped in a "router" key
    let i: RouterInterface =
        serde_json::from_value(fixture("neutron/router-add-interface-response.json"))
            .unwrap_or_default();
    assert_eq!(i.id, "915a14a6-867b-4af7-83d1-70efceb146f9");
    assert_eq!(i.port_id, "2dc46bcc-d1f2-4077-b99e-91ee28afaff0");
    assert_eq!(
        i.subnet_id,
        fixture("neutron/router-add-interface-request.json")["subnet_id"]
    );

    let g: SecurityGroup = at(
        &fixture("neutron/security-group-create-response.json"),
        "security_group",
    );
    assert_eq!(g.security_group_rules.len(), 2);
    assert!(g
        .security_group_rules
        .iter()
        .all(|r| r.direction == "egress" && r.protocol.is_none() && r.port_range_min.is_none()));
    let rule: SecurityGroupRule = at(
        &fixture("neutron/security-group-rule-create-response.json"),
        "security_group_rule",
    );
    assert_eq!(
        (
            rule.port_range_min,
            rule.port_range_max,
            rule.protocol.as_deref()
        ),
        (Some(80), Some(80), Some("tcp"))
    );
    assert_eq!(
        rule.remote_group_id.as_deref(),
        Some("85cc3048-abc3-43cc-89b3-377341426ac5")
    );

    let p: Port = at(&fixture("neutron/port-create-response.json"), "port");
    assert_eq!(p.fixed_ips[0].ip_address.as_deref(), Some("10.0.0.2"));
    assert_eq!(p.security_groups, ["f0ac4394-7e4a-4409-9701-ba8be283dbc3"]);
    assert_eq!(p.status.as_deref(), Some("DOWN"));

    let fips: Vec<FloatingIp> = at(
        &fixture("neutron/floating-ips-list-response.json"),
        "floatingips",
    );
    assert_eq!(fips.len(), 3);
    assert_eq!(
        fips[0].port_id.as_deref(),
        Some("ce705c24-c1ef-408a-bda3-7bbd946164ab")
    );
    assert_eq!(
        (fips[1].port_id.as_deref(), fips[1].status.as_deref()),
        (None, Some("DOWN"))
    );
    let f: FloatingIp = at(
        &fixture("neutron/floatingip-create-response.json"),
        "floatingip",
    );
    assert_eq!(f.floating_ip_address, "172.24.4.228");

    let q: BTreeMap<String, i64> = at(
        &fixture("neutron/quotas-list-for-project-response.json"),
        "quota",
    );
    assert_eq!(
        (q.get("floatingip"), q.get("rbac_policy")),
        (Some(&50), Some(&-1))
    );
    let usage = quota_usages_from_json(
        &json!({"quota": {"network": {"used": 3, "limit": 10, "reserved": 0}, "rbac_policy": {"used": 0, "limit": -1, "reserved": 0}}}),
        "quota",
    )
    .unwrap_or_default();
    assert_eq!(usage.get("network").map(|u| u.available()), Some(Some(7)));
    assert_eq!(usage.get("rbac_policy").map(|u| u.available()), Some(None));
}

#[test]
fn neutron_request_bodies() {
    let sample = fixture("neutron/subnet-create-request.json");
    let ours = SubnetCreate {
        network_id: "d32019d3-bc6e-4319-9c1d-6722fc136a22".into(),
        cidr: "192.168.199.0/24".into(),
        ..SubnetCreate::default()
    }
    .to_body();
    for key in ["network_id", "ip_version", "cidr"] {
        assert_eq!(ours["subnet"][key], sample["subnet"][key], "{key}");
    }
    assert!(ours["subnet"].get("gateway_ip").is_none());
    let no_gw = SubnetCreate {
        gateway: Gateway::Disabled,
        dns_nameservers: vec!["1.1.1.1".into()],
        ..SubnetCreate::default()
    }
    .to_body();
    assert_eq!(no_gw["subnet"]["gateway_ip"], Value::Null);
    assert_eq!(no_gw["subnet"]["dns_nameservers"], json!(["1.1.1.1"]));

    let sample = fixture("neutron/security-group-rule-create-request.json");
    let ours = RuleCreate {
        security_group_id: "a7734e61-b545-452d-a3cd-0189cbd9747a".into(),
        direction: Direction::Ingress,
        ethertype: EtherType::IPv4,
        protocol: Some("tcp".into()),
        port_range: Some((80, 80)),
        remote: Remote::Group("85cc3048-abc3-43cc-89b3-377341426ac5".into()),
        description: None,
    }
    .to_body();
    for key in [
        "direction",
        "ethertype",
        "protocol",
        "remote_group_id",
        "security_group_id",
    ] {
        assert_eq!(
            ours["security_group_rule"][key], sample["security_group_rule"][key],
            "{key}"
        );
    }
    assert_eq!(ours["security_group_rule"]["port_range_min"], 80);
    let cidr = RuleCreate {
        remote: Remote::Cidr("0.0.0.0/0".into()),
        ethertype: EtherType::IPv6,
        direction: Direction::Egress,
        ..RuleCreate::default()
    }
    .to_body();
    assert_eq!(cidr["security_group_rule"]["remote_ip_prefix"], "0.0.0.0/0");
    assert_eq!(cidr["security_group_rule"]["ethertype"], "IPv6");
    assert_eq!(cidr["security_group_rule"]["direction"], "egress");
    assert!(cidr["security_group_rule"].get("remote_group_id").is_none());

    let port = PortCreate {
        name: "private-port".into(),
        network_id: "a87cc70a-3e15-4acf-8205-9b711a3531b7".into(),
        security_groups: Some(vec!["sg1".into()]),
        tags: vec!["t".into()],
        ..PortCreate::default()
    };
    let sample = fixture("neutron/port-create-request.json");
    assert_eq!(
        port.to_body(false)["port"]["network_id"],
        sample["port"]["network_id"]
    );
    assert_eq!(port.to_body(false)["port"]["name"], sample["port"]["name"]);
    assert!(port.to_body(false)["port"].get("tags").is_none());
    assert_eq!(port.to_body(true)["port"]["tags"], json!(["t"]));
    let q = Query::new()
        .name("n")
        .tags(&["a", "b"])
        .eq("device_id", "d");
    assert_eq!(
        q.0,
        vec![
            ("name".into(), "n".into()),
            ("tags".into(), "a,b".into()),
            ("device_id".into(), "d".into())
        ]
    );
}
