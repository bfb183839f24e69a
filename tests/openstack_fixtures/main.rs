//! Offline tests of the OpenStack client: config loading, error envelopes, parsers over the
//! recorded API bodies in tests/fixtures/openstack-api/, request bodies, the retry policy,
//! and the whole request path against a scripted local HTTP server. One module per service
//! (and per concern); the imports and fixture helpers every module uses are here.

mod cinder;
mod config;
mod errors;
mod glance;
mod keystone;
mod manila;
mod neutron;
mod nova;
mod nova_actions;
mod request_path;
mod retry;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hvd_cluster::openstack::auth::{self, Catalog};
use hvd_cluster::openstack::compute::{
    BootVolume, ComputeLimits, Flavor, Keypair, PowerState, Server, ServerStatus,
};
use hvd_cluster::openstack::config::{
    AppCredentialRef, AuthMethod, ConfigError, ConfigFile, ConfigFiles, DomainRef, Interface,
    ProjectRef, Secret, UserRef,
};
use hvd_cluster::openstack::error::{self, classify, decode_error_body, ApiError};
use hvd_cluster::openstack::http::{self, Failure, Method, Replay, RetryPolicy};
use hvd_cluster::openstack::image::{pick_newest, Image};
use hvd_cluster::openstack::network::{
    Direction, EtherType, FloatingIp, Gateway, NetworkInfo, Port, PortCreate, Remote, Router,
    RouterInterface, RuleCreate, SecurityGroup, SecurityGroupRule, Subnet, SubnetCreate,
};
use hvd_cluster::openstack::service::{self, Service};
use hvd_cluster::openstack::share::{AccessRule, ExportLocation, Share, ShareCreate, ShareLimits};
use hvd_cluster::openstack::volume::{Volume, VolumeCreate, VolumeLimits};
use hvd_cluster::openstack::{
    quota_usages_from_json, ClientOptions, CloudConfig, OpenStack, OpenStackError, Query, Request,
    ServerCreate, ServerFilter, ServerNetwork,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn fixture_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openstack-api")
        .join(rel)
}

fn fixture(rel: &str) -> Value {
    let path = fixture_path(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture_bytes(rel: &str) -> Vec<u8> {
    std::fs::read(fixture_path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn at<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> T {
    serde_json::from_value(v[key].clone()).unwrap_or_else(|e| panic!("decoding {key}: {e}"))
}
