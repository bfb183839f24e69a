#!/usr/bin/env python3
# hvd-cluster's autostop agent, on the master: stops the cluster (shelves its servers, the
# workers first, the master last) once it has been idle for the configured time, with the
# user's machine offline. Python's standard library only: a stock cloud image has python3.
#
# Idle means, at every look: no job of `hvd-cluster run` queued or running (its runner,
# templates/node/job_runner.sh, lives as long as either), no horovodrun / mpirun / orterun /
# prterun process on the master (`bench`, `check` or a Jupyter terminal go through one), no Jupyter kernel busy and no Jupyter activity (its /api/status `last_activity`), and
# no GPU of the master above the utilisation threshold (nvidia-smi, where there is one).
# The first minutes after the master boots count as busy too (`boot_grace_seconds`, 600 by
# default): after `hvd-cluster start` unshelves the cluster, the agent comes back with the
# master and must not stop it again while start's bootstrap and check are still running.
# Every decision is logged with its reason.
#
# Its config (root-only, written by `hvd-cluster up`) holds the application credential that
# may read and shelve exactly this cluster's servers; the secret never reaches argv or a log.
#   autostop_agent.py CONFIG.json          # runs until it stops the cluster
#   autostop_agent.py CONFIG.json --once   # one look, printed; stops nothing
#   autostop_agent.py CONFIG.json --publish TEXT   # says TEXT for `status` (e.g. "off")

import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import ssl
import urllib.error
import urllib.request

JOB_PROGRAMS = {"horovodrun", "mpirun", "orterun", "prterun"}
BOOT_GRACE_SECONDS = 600
SHELVE_TRIES = 3


def booted_at():
    """When this host booted (epoch seconds), from /proc/uptime; None when unreadable."""
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            return now() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def now():
    return time.time()


def tls_context(config):
    """How the cloud's HTTPS is trusted: as on the machine that installed the agent (its
    cloud config's CA bundle, or no verification where it has `insecure`)."""
    ctx = ssl.create_default_context(cadata=config.get("ca_pem"))
    if config.get("insecure"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Agent:
    def __init__(self, config):
        self.c = config
        self.tls = tls_context(config)
        self.started = now()
        self.last_busy = self.started
        self.log_path = config.get("log", "/var/log/hvd-cluster/autostop.log")

    def log(self, message):
        line = "%s %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), message)
        print(line, flush=True)
        try:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            print("cannot write %s: %s" % (self.log_path, e), file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- what keeps it busy
    def jobs(self):
        """Job processes on this host (the hvd container's processes are visible here)."""
        found, runners = [], []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            words = [a.decode("utf-8", "replace") for a in argv[:4]]
            # a job of `hvd-cluster run`, queued or running: its runner waits or runs it
            if len(words) == 4 and os.path.basename(words[1]) == "job_runner.sh" and words[2] == "run":
                runners.append("job %s queued or running (pid %s)" % (words[3][:12], pid))
                continue
            for arg in words[:3]:
                name = os.path.basename(arg)
                if name in JOB_PROGRAMS:
                    found.append("%s (pid %s)" % (name, pid))
                    break
        return found + runners

    def jupyter(self):
        """(busy kernels, last activity as epoch seconds) or None when Jupyter does not answer."""
        port = self.c.get("jupyter_port", 8888)
        try:
            with open(self.c.get("jupyter_token_file", "/etc/hvd-cluster/jupyter/token"), encoding="utf-8") as f:
                token = f.read().strip()
        except OSError:
            token = ""

        def get(path):
            # no_track_activity: the agent's own looks are not activity
            req = urllib.request.Request(
                "http://127.0.0.1:%d%s?no_track_activity=1" % (port, path),
                headers={"Authorization": "token " + token} if token else {},
            )
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)

        try:
            status = get("/api/status")
            kernels = get("/api/kernels")
        except (OSError, ValueError):
            return None
        busy = [k.get("id", "?") for k in kernels if k.get("execution_state") == "busy"]
        last = parse_time(status.get("last_activity"))
        return busy, last

    def gpus(self):
        """Utilisation (%) of each GPU with nvidia-smi; [] without one."""
        smi = shutil.which("nvidia-smi")
        if not smi:
            return []
        try:
            out = subprocess.run(
                [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [int(v) for v in out.split() if v.strip().isdigit()]

    def look(self):
        """(reasons it is busy, idle seconds so far)."""
        reasons = []
        booted = booted_at()
        grace = self.c.get("boot_grace_seconds", BOOT_GRACE_SECONDS)
        if booted is not None and now() < booted + grace:
            # stable wording (no counter): a change of mind is logged and published once
            until = datetime.datetime.fromtimestamp(booted + grace, datetime.timezone.utc)
            reasons.append("just booted: holds until %s (a start's bootstrap and check run first)"
                           % until.strftime("%Y-%m-%dT%H:%M:%SZ"))
        jobs = self.jobs()
        if jobs:
            reasons.append("job running: " + ", ".join(jobs[:3]))
        j = self.jupyter()
        last_activity = None
        if j is not None:
            busy, last_activity = j
            if busy:
                reasons.append("Jupyter kernel busy: %d" % len(busy))
        threshold = self.c.get("gpu_busy_percent", 10)
        hot = [u for u in self.gpus() if u >= threshold]
        if hot:
            reasons.append("GPU busy: %s%%" % "/".join(str(u) for u in hot))
        t = now()
        if reasons:
            self.last_busy = t
        since = max(self.last_busy, last_activity or 0)
        return reasons, max(0, t - since), j is not None

    # ---------------------------------------------------------------- stopping
    def token(self):
        body = json.dumps({"auth": {"identity": {
            "methods": ["application_credential"],
            "application_credential": {"id": self.c["credential_id"], "secret": self.c["credential_secret"]},
        }}}).encode()
        req = urllib.request.Request(
            self.c["identity_url"].rstrip("/") + "/auth/tokens", data=body, method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30, context=self.tls) as r:
            return r.headers["X-Subject-Token"]

    def nova(self, token, method, path, body=None):
        req = urllib.request.Request(
            self.c["compute_url"].rstrip("/") + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"X-Auth-Token": token, "Content-Type": "application/json",
                     "OpenStack-API-Version": "compute 2.90"},
        )
        with urllib.request.urlopen(req, timeout=30, context=self.tls) as r:
            raw = r.read()
            return json.loads(raw) if raw else None

    def server(self, token, sid):
        s = self.nova(token, "GET", "/servers/" + sid)["server"]
        return s.get("status"), s.get("OS-EXT-STS:task_state")

    def shelve(self, token, servers):
        """Shelves these servers (name, id) and waits until each is shelved. A shelve Nova took
        back (the server ACTIVE or SHUTOFF again with no task: its snapshot upload failed) is
        sent again, SHELVE_TRIES times in all; then this stop gives up until the next look."""
        tries = {}

        def send(name, sid):
            tries[sid] = tries.get(sid, 0) + 1
            self.nova(token, "POST", "/servers/%s/action" % sid, {"shelve": None})
            again = "" if tries[sid] == 1 else " again (try %d of %d)" % (tries[sid], SHELVE_TRIES)
            self.log("%s: shelve sent%s" % (name, again))

        for name, sid in servers:
            status, task = self.server(token, sid)
            if status in ("SHELVED", "SHELVED_OFFLOADED") or task:
                self.log("%s: %s%s, not shelved again" % (name, status, "/" + task if task else ""))
                continue
            send(name, sid)
        deadline = now() + self.c.get("stop_timeout", 1800)
        waiting = list(servers)
        while waiting and now() < deadline:
            time.sleep(5)
            left = []
            for name, sid in waiting:
                status, task = self.server(token, sid)
                if status in ("SHELVED", "SHELVED_OFFLOADED") and not task:
                    self.log("%s: %s" % (name, status))
                    continue
                if status in ("ACTIVE", "SHUTOFF") and not task and sid in tries:
                    if tries[sid] >= SHELVE_TRIES:
                        self.log("%s: Nova took the shelve back %d times (now %s)" % (
                            name, tries[sid], status))
                        return False
                    self.log("%s: Nova took the shelve back (now %s)" % (name, status))
                    send(name, sid)
                left.append((name, sid))
            waiting = left
        return not waiting

    def stop(self):
        token = self.token()
        workers = [(s["name"], s["id"]) for s in self.c["servers"] if s["role"] != "master"]
        master = [(s["name"], s["id"]) for s in self.c["servers"] if s["role"] == "master"]
        if workers and not self.shelve(token, workers):
            self.log("workers not all shelved; the master stays up, trying again")
            return False
        self.drop_before_shelve()
        self.log("shelving the master; this agent stops with it")
        for name, sid in master:
            self.nova(self.token(), "POST", "/servers/%s/action" % sid, {"shelve": None})
            self.log("%s: shelve sent" % name)
        return True

    def drop_before_shelve(self):
        """Removes the files the config names (a glob: the image's archive kept on the master
        for `scale` and `heal`), which would otherwise go into the master's shelve snapshot."""
        pattern = self.c.get("drop_before_shelve")
        if not pattern:
            return
        dropped = 0
        for path in glob.glob(pattern):
            try:
                dropped += os.path.getsize(path)
                os.remove(path)
            except OSError as e:
                self.log("could not remove %s: %s" % (path, describe(e)))
        if dropped:
            self.log("removed the image's archive (%.1f MB): not into the snapshot" % (dropped / 1e6))

    def publish(self, state):
        """Says on the master's server what the agent decided, for `hvd-cluster status` (one
        metadata key, the only one its credential may set); best effort."""
        master = [s["id"] for s in self.c["servers"] if s["role"] == "master"]
        if not master:
            return False
        key = self.c.get("state_key", "hvd-cluster-autostop")
        try:
            self.nova(self.token(), "PUT", "/servers/%s/metadata/%s" % (master[0], key),
                      {"meta": {key: state[:255]}})
            return True
        except (OSError, ValueError, KeyError) as e:
            self.log("could not publish the state: %s" % describe(e))
            return False

    def run(self):
        idle_limit = self.c["idle_seconds"]
        tick = self.c.get("tick_seconds", 30)
        self.log("started: stops the cluster after %ds idle (looks every %ds); servers: %s" % (
            idle_limit, tick, ", ".join(s["name"] for s in self.c["servers"])))
        said = None
        while True:
            reasons, idle, jupyter_seen = self.look()
            if reasons:
                said_now = "busy: " + "; ".join(reasons)
            else:
                said_now = "idle"
            if said_now != said:
                self.log(said_now + ("" if jupyter_seen else " (Jupyter not answering)"))
                said = said_now
                stamp = datetime.datetime.fromtimestamp(now() - idle, datetime.timezone.utc)
                rule = "stops after %ds idle" % idle_limit
                self.publish("%s; %s" % (
                    said_now if reasons else "idle since " + stamp.strftime("%Y-%m-%dT%H:%M:%SZ"), rule))
            if not reasons and idle >= idle_limit:
                self.log("idle for %ds (limit %ds): stopping the cluster" % (idle, idle_limit))
                self.publish("stopping: idle for %ds" % idle)
                try:
                    if self.stop():
                        return 0
                except (OSError, ValueError, KeyError) as e:
                    # HTTPError is an OSError: its code (401: the credential refused) is logged
                    self.log("stopping failed: %s; trying again in %ds" % (describe(e), tick))
                said = None
            time.sleep(tick)


def describe(e):
    if isinstance(e, urllib.error.HTTPError):
        return "HTTP %d from %s" % (e.code, e.url.split("?")[0])
    return "%s: %s" % (type(e).__name__, e)


def parse_time(value):
    if not value:
        return None
    try:
        text = value.replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def main(argv):
    if len(argv) < 2:
        print(__doc__ or "usage: autostop_agent.py CONFIG.json [--once]", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        config = json.load(f)
    agent = Agent(config)
    if argv[2:3] == ["--publish"] and len(argv) == 4:
        return 0 if agent.publish(argv[3]) else 1
    if "--once" in argv[2:]:
        reasons, idle, jupyter_seen = agent.look()
        print(json.dumps({"busy": reasons, "idle_seconds": int(idle), "jupyter": jupyter_seen}))
        return 0
    return agent.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
