//! The whole request path against a scripted local HTTP server: retries, re-authentication, call counts, Neutron tags, pagination, microversions, token renewal, failures that explain themselves.

use super::*;

#[derive(Clone)]
pub(super) struct Canned {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: String,
}

pub(super) fn canned(status: u16, body: Value) -> Canned {
    Canned {
        status,
        headers: Vec::new(),
        body: body.to_string(),
    }
}

#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) method: String,
    pub(super) target: String,
    pub(super) headers: HashMap<String, String>,
    pub(super) body: String,
}

/// A scripted cloud on 127.0.0.1 (also used by the other request modules).
#[derive(Clone)]
pub(super) struct MockCloud {
    base: String,
    routes: Arc<Mutex<HashMap<String, VecDeque<Canned>>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl MockCloud {
    pub(super) fn start() -> MockCloud {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let mock = MockCloud {
            base: format!("http://127.0.0.1:{port}"),
            routes: Arc::default(),
            seen: Arc::default(),
        };
        let m = mock.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let m = m.clone();
                std::thread::spawn(move || m.serve(stream));
            }
        });
        mock
    }

    /// Responses for "METHOD /path", served in order; the last one repeats.
    pub(super) fn route(&self, key: &str, responses: Vec<Canned>) {
        if let Ok(mut r) = self.routes.lock() {
            r.insert(key.to_string(), responses.into());
        }
    }

    pub(super) fn seen(&self, key: &str) -> Vec<Seen> {
        let (method, path) = key.split_once(' ').unwrap_or(("", ""));
        self.seen
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|r| r.method == method && r.target.split('?').next() == Some(path))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn serve(&self, stream: std::net::TcpStream) {
        let mut reader = BufReader::new(match stream.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        });
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        let _ = reader.read_exact(&mut body);
        let path = target.split('?').next().unwrap_or_default().to_string();
        if let Ok(mut s) = self.seen.lock() {
            s.push(Seen {
                method: method.clone(),
                target: target.clone(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        let key = format!("{method} {path}");
        let reply = self
            .routes
            .lock()
            .ok()
            .and_then(|mut r| {
                let q = r.get_mut(&key)?;
                if q.len() > 1 {
                    q.pop_front()
                } else {
                    q.front().cloned()
                }
            })
            .unwrap_or_else(|| {
                canned(
                    404,
                    json!({"itemNotFound": {"code": 404, "message": format!("no route {key}")}}),
                )
            });
        let mut out = format!("HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n", reply.status, reply.body.len());
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(&reply.body);
        let mut stream = stream;
        let _ = stream.write_all(out.as_bytes());
    }

    pub(super) fn token_response(&self, lifetime_secs: i64) -> Canned {
        let now = chrono::Utc::now();
        let ep = |t: &str, path: &str| json!({"type": t, "endpoints": [{"interface": "public", "region_id": "R1", "region": "R1", "url": format!("{}{path}", self.base)}]});
        Canned {
            status: 201,
            headers: vec![("X-Subject-Token".into(), "gAAAA-token-value".into())],
            body: json!({"token": {
                "issued_at": now.to_rfc3339(),
                "expires_at": (now + chrono::Duration::seconds(lifetime_secs)).to_rfc3339(),
                "project": {"id": "p-123", "name": "demo"},
                "user": {"id": "u-1", "name": "demo"},
                "catalog": [ep("compute", "/compute/v2.1"), ep("network", "/network"), ep("image", "/image"), ep("sharev2", "/share/v2"), ep("block-storage", "/volume/v3")]
            }})
            .to_string(),
        }
    }

    pub(super) fn config(&self) -> CloudConfig {
        CloudConfig {
            cloud: Some("mock".into()),
            origin: "test".into(),
            auth_url: format!("{}/identity/v3", self.base),
            auth: AuthMethod::Password {
                user: UserRef::Name {
                    name: "demo".into(),
                    domain: DomainRef::Id("default".into()),
                },
                password: Secret::new("pa55w0rd-never-shown"),
                project: ProjectRef::Name {
                    name: "demo".into(),
                    domain: DomainRef::Id("default".into()),
                },
            },
            region: None,
            interface: Interface::Public,
            cacert: None,
            insecure: false,
        }
    }
}

pub(super) fn fast() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            max_retry_after: Duration::from_millis(50),
        },
        timeout: Some(Duration::from_secs(10)),
        connect_timeout: Duration::from_secs(2),
        renew_before: Duration::from_secs(300),
    }
}

pub(super) const AUTH: &str = "POST /identity/v3/auth/tokens";

#[tokio::test]
async fn request_path_retries_reauths_and_counts() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    let flavors = json!({"flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram": 2048, "disk": 20, "swap": 0, "extra_specs": {}}]});
    mock.route(
        "GET /compute/v2.1/flavors/detail",
        vec![
            canned(
                503,
                json!({"computeFault": {"code": 503, "message": "busy"}}),
            ),
            Canned {
                headers: vec![("Retry-After".into(), "0".into())],
                ..canned(429, json!({"message": "slow down"}))
            },
            canned(200, flavors),
        ],
    );
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    assert_eq!(os.project_id(), "p-123");
    assert_eq!(os.calls(), 1);
    let f = os.compute().find_flavor("m1.small").await?;
    assert_eq!(f.id, "1");
    assert_eq!(os.calls(), 4, "1 token + 503 + 429 + 200");
    let seen = mock.seen("GET /compute/v2.1/flavors/detail");
    assert_eq!(seen.len(), 3);
    let h = &seen[2].headers;
    assert_eq!(
        h.get("x-openstack-nova-api-version").map(String::as_str),
        Some(service::NOVA_MICROVERSION)
    );
    assert_eq!(
        h.get("x-auth-token").map(String::as_str),
        Some("gAAAA-token-value")
    );
    // the auth body carried the password and the project scope
    let auth = mock.seen(AUTH);
    assert!(auth[0].body.contains("pa55w0rd-never-shown") && auth[0].body.contains("\"scope\""));

    // a 401 re-authenticates once and repeats the call
    mock.route(
        "GET /network/v2.0/networks",
        vec![
            canned(
                401,
                json!({"error": {"code": 401, "title": "Unauthorized", "message": "expired"}}),
            ),
            canned(
                200,
                json!({"networks": [{"id": "n1", "name": "public", "router:external": true}]}),
            ),
        ],
    );
    let public = os.network().find_network("public").await?;
    assert!(public.external);
    assert_eq!(mock.seen(AUTH).len(), 2);
    let q = &mock.seen("GET /network/v2.0/networks")[1].target;
    assert!(q.ends_with("?name=public"), "{q}");

    // POST 500 is not repeated; the error carries method, path, status, message, request id
    mock.route(
        "POST /compute/v2.1/servers",
        vec![Canned {
            headers: vec![("x-openstack-request-id".into(), "req-abc".into())],
            ..canned(
                500,
                json!({"computeFault": {"code": 500, "message": "Unexpected API Error."}}),
            )
        }],
    );
    let create = ServerCreate {
        name: "s".into(),
        ..ServerCreate::default()
    };
    let err = os
        .compute()
        .create_server(&create)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "nova POST /compute/v2.1/servers: HTTP 500 computeFault: Unexpected API Error. (request id req-abc)"
    );
    assert_eq!(mock.seen("POST /compute/v2.1/servers").len(), 1);

    // nova over quota
    mock.route(
        "POST /compute/v2.1/servers",
        vec![canned(
            403,
            fixture("errors/nova-403-quota-exceeded-instances.json"),
        )],
    );
    let err = os.compute().create_server(&create).await.err();
    assert!(
        err.as_ref().is_some_and(|e| e.is_quota_exceeded()),
        "{err:?}"
    );

    // DELETE subnet: 409 in use is waited out (opted in); neutron 409 OverQuota is not retried
    mock.route(
        "DELETE /network/v2.0/subnets/s1",
        vec![
            canned(
                409,
                json!({"NeutronError": {"type": "SubnetInUse", "message": "in use", "detail": ""}}),
            ),
            canned(
                409,
                json!({"NeutronError": {"type": "SubnetInUse", "message": "in use", "detail": ""}}),
            ),
            Canned {
                status: 204,
                headers: vec![],
                body: String::new(),
            },
        ],
    );
    os.network().delete_subnet("s1").await?;
    assert_eq!(mock.seen("DELETE /network/v2.0/subnets/s1").len(), 3);
    mock.route(
        "POST /network/v2.0/floatingips",
        vec![canned(
            409,
            fixture("errors/neutron-409-OverQuota-floatingip.json"),
        )],
    );
    let err = os
        .network()
        .create_floating_ip(&hvd_cluster::openstack::FloatingIpCreate {
            floating_network_id: "n1".into(),
            ..Default::default()
        })
        .await
        .err();
    assert!(
        err.as_ref().is_some_and(|e| e.is_quota_exceeded()),
        "{err:?}"
    );
    assert_eq!(mock.seen("POST /network/v2.0/floatingips").len(), 1);

    // deletes of missing things succeed; gets of missing things are None
    mock.route(
        "DELETE /compute/v2.1/servers/gone",
        vec![canned(404, fixture("errors/nova-404-itemNotFound.json"))],
    );
    os.compute().delete_server("gone").await?;
    assert!(os.compute().get_server("nope").await?.is_none());

    // nothing secret in any error text
    assert!(!err
        .map(|e| format!("{e} {e:?}"))
        .unwrap_or_default()
        .contains("pa55w0rd"));
    Ok(())
}

#[tokio::test]
async fn neutron_create_tags_with_put_and_lists_by_tag() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    mock.route(
        "POST /network/v2.0/networks",
        vec![canned(
            201,
            json!({"network": {"id": "n9", "name": "c-net", "tags": []}}),
        )],
    );
    mock.route(
        "PUT /network/v2.0/networks/n9/tags",
        vec![canned(200, json!({"tags": ["hvd-cluster", "c"]}))],
    );
    mock.route(
        "GET /network/v2.0/extensions",
        vec![canned(
            200,
            json!({"extensions": [{"alias": "standard-attr-tag"}]}),
        )],
    );
    mock.route(
        "POST /network/v2.0/ports",
        vec![canned(
            201,
            json!({"port": {"id": "p9", "network_id": "n9"}}),
        )],
    );
    mock.route(
        "PUT /network/v2.0/ports/p9/tags",
        vec![canned(200, json!({"tags": ["c"]}))],
    );
    mock.route(
        "PUT /network/v2.0/security-groups/g9/tags",
        vec![canned(
            400,
            json!({"NeutronError": {"type": "InvalidInput", "message": "bad tag", "detail": ""}}),
        )],
    );
    mock.route(
        "POST /network/v2.0/security-groups",
        vec![canned(
            201,
            json!({"security_group": {"id": "g9", "name": "c-sg"}}),
        )],
    );
    mock.route(
        "DELETE /network/v2.0/security-groups/g9",
        vec![Canned {
            status: 204,
            headers: vec![],
            body: String::new(),
        }],
    );
    mock.route(
        "GET /network/v2.0/routers",
        vec![canned(200, json!({"routers": []}))],
    );

    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    let net = os
        .network()
        .create_network(&hvd_cluster::openstack::NetworkCreate {
            name: "c-net".into(),
            tags: vec!["hvd-cluster".into(), "c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(net.tags, ["hvd-cluster", "c"]);
    assert_eq!(
        mock.seen("PUT /network/v2.0/networks/n9/tags")[0].body,
        r#"{"tags":["hvd-cluster","c"]}"#
    );
    let port = os
        .network()
        .create_port(&PortCreate {
            name: "p".into(),
            network_id: "n9".into(),
            tags: vec!["c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(port.tags, ["c"]);
    assert!(
        !mock.seen("POST /network/v2.0/ports")[0]
            .body
            .contains("tags"),
        "no tag-on-create extension"
    );
    // a group whose tagging fails is removed again
    let err = os
        .network()
        .create_security_group(&hvd_cluster::openstack::SecurityGroupCreate {
            name: "c-sg".into(),
            tags: vec!["x,y".into()],
            ..Default::default()
        })
        .await;
    assert!(err.is_err());
    assert_eq!(
        mock.seen("DELETE /network/v2.0/security-groups/g9").len(),
        1
    );
    os.network()
        .list_routers(&Query::new().tags(&["hvd-cluster", "c"]))
        .await?;
    assert_eq!(
        mock.seen("GET /network/v2.0/routers")[0].target,
        "/network/v2.0/routers?tags=hvd-cluster%2Cc"
    );
    Ok(())
}

#[tokio::test]
async fn pagination_microversions_and_metadata_filters() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    mock.route(
        "GET /compute/v2.1/servers/detail",
        vec![
            canned(200, json!({"servers": [{"id": "a", "status": "BUILD", "tags": ["c"]}], "servers_links": [{"rel": "next", "href": "http://elsewhere/v2.1/servers/detail?tags=c&marker=a"}]})),
            canned(200, json!({"servers": [{"id": "b", "status": "ACTIVE", "tags": ["c"]}]})),
        ],
    );
    mock.route("GET /share/v2/shares/detail", vec![canned(200, json!({"shares": [{"id": "s1", "status": "available", "metadata": {"hvd-cluster": "c"}}]}))]);
    mock.route(
        "GET /volume/v3/volumes/detail",
        vec![canned(200, json!({"volumes": []}))],
    );
    mock.route("GET /image/v2/images", vec![canned(200, json!({"images": [{"id": "i1", "name": "debian", "status": "active", "created_at": "2026-01-01T00:00:00Z"}]}))]);
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    let servers = os
        .compute()
        .list_servers(&ServerFilter {
            tags: vec!["c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(
        servers.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let seen = mock.seen("GET /compute/v2.1/servers/detail");
    assert_eq!(seen[0].target, "/compute/v2.1/servers/detail?tags=c");
    assert_eq!(
        seen[1].target, "/compute/v2.1/servers/detail?tags=c&marker=a",
        "next page asked of our own endpoint"
    );

    let meta: BTreeMap<String, String> = [("hvd-cluster".to_string(), "c".to_string())].into();
    assert_eq!(os.share().list_shares(&meta).await?.len(), 1);
    let s = &mock.seen("GET /share/v2/shares/detail")[0];
    assert_eq!(
        s.target,
        "/share/v2/shares/detail?metadata=%7B%22hvd-cluster%22%3A%22c%22%7D"
    );
    assert_eq!(
        s.headers
            .get("x-openstack-manila-api-version")
            .map(String::as_str),
        Some(service::MANILA_MICROVERSION)
    );
    os.volume().list_volumes(&meta).await?;
    let v = &mock.seen("GET /volume/v3/volumes/detail")[0];
    assert_eq!(
        v.headers.get("openstack-api-version"),
        Some(&format!("volume {}", service::CINDER_MICROVERSION))
    );
    let img = os.image().find_image("debian").await?;
    assert_eq!(img.id, "i1");
    assert_eq!(
        mock.seen("GET /image/v2/images")[0].target,
        "/image/v2/images?name=debian&status=active"
    );
    assert!(mock.seen("GET /network/v2.0/networks").is_empty());
    assert_eq!(
        os.endpoint(Service::Network).await?,
        format!("{}/network/v2.0", mock.base)
    );
    // a raw call through the same path
    let raw = os
        .request(&Request::get(Service::Image, "images").query("name", "debian"))
        .await?;
    assert_eq!(raw.status, 200);
    Ok(())
}

#[tokio::test]
async fn token_is_renewed_before_it_expires() -> TestResult {
    let mock = MockCloud::start();
    // lives 2 s: renewed after half its lifetime
    mock.route(AUTH, vec![mock.token_response(2)]);
    mock.route(
        "GET /compute/v2.1/limits",
        vec![canned(200, fixture("nova/limits-get-resp.v2.57.json"))],
    );
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    os.compute().limits().await?;
    assert_eq!(mock.seen(AUTH).len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let l = os.compute().limits().await?;
    assert_eq!(l.max_total_instances, 10);
    assert_eq!(mock.seen(AUTH).len(), 2);
    Ok(())
}

#[tokio::test]
async fn auth_failures_and_unreachable_clouds_explain_themselves() -> TestResult {
    let mock = MockCloud::start();
    mock.route(
        AUTH,
        vec![Canned {
            headers: vec![("x-openstack-request-id".into(), "req-k1".into())],
            ..canned(401, fixture("errors/keystone-401-unauthorized.json"))
        }],
    );
    let err = OpenStack::connect_with(&mock.config(), fast()).await.err();
    let msg = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        matches!(
            err,
            Some(OpenStackError::Auth {
                status: Some(401),
                ..
            })
        ),
        "{err:?}"
    );
    assert!(
        msg.contains("/identity/v3 failed")
            && msg.contains("user \"demo\"")
            && msg.contains("project \"demo\"")
            && msg.contains("The request you have made requires authentication.")
            && msg.contains("req-k1"),
        "{msg}"
    );
    assert!(!msg.contains("pa55w0rd") && !format!("{err:?}").contains("pa55w0rd"));
    assert_eq!(mock.seen(AUTH).len(), 1, "401 is not retried");

    // nothing listens: refused, retried, then a transport error naming the URL
    let closed = TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    let mut cfg = mock.config();
    cfg.auth_url = format!("http://127.0.0.1:{port}/v3");
    let err = OpenStack::connect_with(&cfg, fast()).await.err();
    let msg = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        matches!(err, Some(OpenStackError::Transport { .. })),
        "{err:?}"
    );
    assert!(
        msg.contains(&format!(
            "keystone POST http://127.0.0.1:{port}/v3/auth/tokens"
        )) && msg.contains("after 4 attempts"),
        "{msg}"
    );
    Ok(())
}
