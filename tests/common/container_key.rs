//! The key inside the Horovod containers (horovodrun's, and a Jupyter terminal's with it) opens
//! the containers' sshd and no host's: the hosts' login user has passwordless sudo, and the
//! autostop agent's credential lives on the master's host.

use super::TestCluster;

/// From the master's container, with the key mounted there (`/etc/hvd-cluster/ssh`): every
/// node's container sshd (the Horovod port) lets it in, and every node's own sshd (port 22) refuses
/// it for the login user and root; the hosts' login key is not in the container's key folder.
pub fn opens_no_host(c: &TestCluster, login_user: &str, ssh_port: u16, nodes: &[String]) {
    let login = std::fs::read_to_string(c.state.join(&c.name).join("id_ed25519.pub"))
        .expect("the cluster's login key");
    let login_blob = login
        .split_whitespace()
        .nth(1)
        .expect("a key line")
        .to_string();
    let folder = c.on_node(
        "master",
        &["sudo cat /etc/hvd-cluster/ssh/authorized_keys /etc/hvd-cluster/ssh/id_ed25519.pub"],
    );
    assert!(
        !folder.contains(&login_blob) && folder.contains("ssh-ed25519 "),
        "the containers' key folder holds a key of their own, not the hosts' login key: {folder}"
    );
    let ssh = "ssh -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=no \
               -o UserKnownHostsFile=/dev/null -o ConnectTimeout=20 -i /etc/hvd-cluster/ssh/id_ed25519";
    for node in nodes {
        // The positive case first: the same key, address and client reach the node's container,
        // so a refusal below is the host's sshd saying no, not a wrong address or a broken key.
        let script = format!(
            "{ssh} -p {ssh_port} root@{node} echo container-ok 2>&1; \
             for u in {login_user} root; do {ssh} -p 22 $u@{node} echo host-open 2>&1; echo host-rc=$?; done"
        );
        let out = c.on_node(
            "master",
            &[&format!("sudo docker exec hvd sh -c '{script}'")],
        );
        assert!(
            out.contains("container-ok"),
            "{node}'s container lets the key in: {out}"
        );
        assert!(
            !out.contains("host-open"),
            "{node}'s host refuses the key: {out}"
        );
        assert_eq!(out.matches("host-rc=255").count(), 2, "{node}: {out}");
        assert_eq!(
            out.matches("Permission denied").count(),
            2,
            "{node}'s sshd refused the key for {login_user} and root: {out}"
        );
    }
}
