#!/bin/bash
# hvd-cluster's jobs on the master: every `run` is a job with a number, run by this
# script detached from the SSH session that started it (setsid), one at a time in the order
# submitted, its output kept in a file on the master's disk (across stop/start). Called as
#   job_runner.sh new                 a new job's number (its folder made, nothing else)
#   job_runner.sh run ID              (detached) waits its turn, runs the job, records the end
#   job_runner.sh list [ID]           one line per job (none for no such job): see `line`
#   job_runner.sh follow ID           the job's output from its first line until it ends
#   job_runner.sh cancel ID           marks the job cancelled; prints its state before (none)
#   job_runner.sh interrupt ID        marks the job interrupted (`stop --force`); prints the same
#   job_runner.sh kill ID             (on every node) ends every process of the job
# A job's folder: argv (horovodrun's words, NUL-separated), command.json (the user's words,
# for display), slots, elastic, submitted, timeline (a mark: Horovod's timeline is recorded), then as it goes state (queued, running, succeeded,
# failed, cancelled, interrupted), runner.pid, boot, started, ended, exit, cancelled and
# interrupted (marks), log; once it ended, record: its `list` line, also appended to the
# jobs' file `ended`, so that a list of a thousand ended jobs reads one file.
# Every ID reaching here passed hvd-cluster's grammar (digits); checked again.
set -u
JOBS=/var/lib/hvd-cluster/jobs
SHARED_JOBS=/shared/jobs
SHARED_LOGS=/shared/logs
BOOT=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)

die() { echo "job_runner: $*" >&2; exit 2; }
valid() { case $1 in '' | *[!0-9]* | 0*) return 1 ;; esac; [ ${#1} -le 9 ]; }
now() { date +%s; }
put() { printf '%s\n' "$2" > "$1.tmp" && mv -f "$1.tmp" "$1"; }   # a file written whole
get() { cat "$1" 2>/dev/null || true; }

# read_into VAR FILE: the file's first line into VAR ("" without one), with no process
# started (a list of a thousand jobs reads ten thousand of these).
read_into() {
  local -n into=$1
  into=
  [ -r "$2" ] && { IFS= read -r into < "$2" || true; }
}

# Whether the job's runner still runs (this boot, its pid, its command line).
alive() {
  local d=$1 pid boot cmdline
  read_into pid "$d/runner.pid"
  read_into boot "$d/boot"
  [ -n "$pid" ] && [ "$boot" = "$BOOT" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)
  [[ $cmdline == *"job_runner.sh run ${d##*/} "* ]]
}

# id state exit submitted started ended slots elastic alive command-json (tab-separated)
line() {
  local d=$1 a=0 state exit submitted started ended slots elastic command
  read_into state "$d/state"
  case $state in
    succeeded | failed | cancelled | interrupted) ;;
    *) alive "$d" && a=1 ;;
  esac
  read_into exit "$d/exit"
  read_into submitted "$d/submitted"
  read_into started "$d/started"
  read_into ended "$d/ended"
  read_into slots "$d/slots"
  read_into elastic "$d/elastic"
  read_into command "$d/command.json"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${d##*/}" "$state" "$exit" "$submitted" \
    "$started" "$ended" "$slots" "$elastic" "$a" "${command//$'\t'/}"
}

# The job's end: its state, then its line kept whole (what `list` prints for it from now on),
# in its folder and at the end of `ended` (one write: a line is never cut).
finish() {
  local d=$1 record
  put "$d/state" "$2"
  record=$(line "$d")
  put "$d/record" "$record"
  printf '%s\n' "$record" >> "$JOBS/ended"
}

# Whether job $1 may start: no other live job runs, and none queued before it waits.
my_turn() {
  local me=$1 d other
  for d in "$JOBS"/[1-9]*; do
    [ -d "$d" ] || continue
    other=${d##*/}
    [ "$other" = "$me" ] && continue
    alive "$d" || continue
    local state
    read_into state "$d/state"
    case $state in
      running) return 1 ;;
      queued) [ "$other" -lt "$me" ] && return 1 ;;
    esac
  done
  return 0
}

# Whether a check or a bench step holds the slots (hvd-cluster's jobs::claim_slots holds
# $JOBS/.check while its horovodrun runs, and reads the jobs under $JOBS/.lock first).
check_running() {
  [ -e "$JOBS/.check" ] || return 1
  ! { flock -n 8; } 8>> "$JOBS/.check"
}

run_job() {
  local id=$1 d=$JOBS/$1 rc
  put "$d/runner.pid" "$$"
  put "$d/boot" "$BOOT"
  : >> "$d/log"
  exec 9> "$JOBS/.lock"
  while :; do
    if [ -e "$d/cancelled" ]; then
      put "$d/ended" "$(now)"; finish "$d" cancelled; return 0
    fi
    if [ -e "$d/interrupted" ]; then
      put "$d/ended" "$(now)"; finish "$d" interrupted; return 0
    fi
    flock 9
    if my_turn "$id" && ! check_running; then
      put "$d/started" "$(now)"; put "$d/state" running
      flock -u 9
      break
    fi
    flock -u 9
    sleep 2
  done
  exec 9>&-
  local argv=()
  mapfile -d '' -t argv < "$d/argv"
  # The job's number in every rank's environment (horovodrun passes its environment on to
  # every rank, local or remote): `kill` finds them by it on every node. Its folders on
  # /shared, seen by every node: one for what it keeps (Horovod's timeline, checkpoints), one
  # for its TensorBoard logs (`hvd-cluster tensorboard` serves /shared/logs, a run per job).
  local shared_dir=$SHARED_JOBS/$id log_dir=$SHARED_LOGS/$id
  mkdir -p "$shared_dir" "$log_dir" 2>> "$d/log" || echo "job_runner: no folder $shared_dir or $log_dir on /shared" >> "$d/log"
  local env=(-e "HVD_CLUSTER_JOB=$id" -e "HVD_CLUSTER_JOB_DIR=$shared_dir" -e "HVD_CLUSTER_LOG_DIR=$log_dir")
  [ -e "$d/timeline" ] && env+=(-e "HOROVOD_TIMELINE=$shared_dir/timeline.json")
  docker exec "${env[@]}" -w /shared hvd "${argv[@]}" >> "$d/log" 2>&1 < /dev/null
  rc=$?
  put "$d/exit" "$rc"
  put "$d/ended" "$(now)"
  if [ -e "$d/cancelled" ]; then
    finish "$d" cancelled
  elif [ "$rc" = 0 ]; then
    finish "$d" succeeded
  elif [ -e "$d/interrupted" ]; then
    finish "$d" interrupted
  else
    finish "$d" failed
  fi
}

# Every process on this node (its containers' too) whose environment names the job: TERM,
# then KILL for what is left after 5 s. Prints how many there were.
kill_job() {
  local id=$1 p n=0 pids=() tries=0
  find_pids() {
    pids=()
    for p in /proc/[0-9]*; do
      [ "${p#/proc/}" = "$$" ] && continue
      grep -qzx "HVD_CLUSTER_JOB=$id" "$p/environ" 2>/dev/null && pids+=("${p#/proc/}")
    done
  }
  find_pids
  n=${#pids[@]}
  [ "$n" -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
  while [ "$tries" -lt 10 ]; do
    find_pids
    [ ${#pids[@]} -eq 0 ] && break
    sleep 0.5
    tries=$((tries + 1))
  done
  find_pids
  [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null
  sleep 0.2
  find_pids
  echo "killed=$n left=${#pids[@]}"
}

cmd=${1:-}
id=${2:-}
[ -z "$id" ] || valid "$id" || die "not a job number"
case $cmd in
  new)
    mkdir -p "$JOBS" && chmod 700 "$JOBS"
    # After every number on record here and on /shared: a /shared kept from an earlier
    # cluster keeps its jobs' folders, and a new job never writes into an old one's.
    last=$( { ls "$JOBS"; ls "$SHARED_JOBS" "$SHARED_LOGS" 2>/dev/null; } | grep -E '^[1-9][0-9]{0,8}$' | sort -n | tail -n 1)
    n=$(( ${last:-0} + 1 ))
    until [ ! -e "$SHARED_JOBS/$n" ] && mkdir "$JOBS/$n" 2>/dev/null; do n=$((n + 1)); done
    echo "$n"
    ;;
  run)
    [ -d "$JOBS/$id" ] || die "no job $id"
    run_job "$id"
    ;;
  list)
    # An ended job's line is its record; the others' are made now. Unordered: the reader
    # sorts by number.
    if [ -n "$id" ]; then
      d=$JOBS/$id
      if [ -r "$d/record" ]; then cat "$d/record"; elif [ -d "$d" ]; then line "$d"; fi
    else
      # `ended` holds the ended jobs' lines; the others are made now (a job that ended before
      # `ended` was kept prints its record). One file read and one directory read, no stat
      # per job.
      declare -A done_ids=()
      if [ -r "$JOBS/ended" ]; then
        mapfile -t ids < <(cut -f1 "$JOBS/ended")
        for n in "${ids[@]}"; do done_ids[$n]=1; done
        cat "$JOBS/ended"
      fi
      shopt -s nullglob
      for d in "$JOBS"/[1-9]*; do
        n=${d##*/}
        valid "$n" && [ -z "${done_ids[$n]:-}" ] || continue
        if [ -r "$d/record" ]; then cat "$d/record"; elif [ -d "$d" ]; then line "$d"; fi
      done
    fi
    ;;
  follow)
    d=$JOBS/$id
    [ -d "$d" ] || exit 3
    if alive "$d"; then
      tail -n +1 -f --pid="$(get "$d/runner.pid")" "$d/log"
    else
      cat "$d/log" 2>/dev/null
    fi
    ;;
  cancel | interrupt)
    # The mark is read by the job's runner: between turns in the queue, and when the job
    # ends (`interrupt`: the cluster stops under it).
    d=$JOBS/$id
    [ -d "$d" ] || { echo none; exit 0; }
    state=$(get "$d/state")
    case $state in
      queued | running) alive "$d" || state=interrupted ;;
    esac
    case $state in
      queued | running) if [ "$cmd" = cancel ]; then : > "$d/cancelled"; else : > "$d/interrupted"; fi ;;
    esac
    echo "$state"
    ;;
  kill)
    kill_job "$id"
    ;;
  *) die "unknown command" ;;
esac
