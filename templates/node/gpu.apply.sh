# The GPU runtime: NVIDIA's container toolkit from NVIDIA's apt repository, trusted only once
# its signing key has the expected fingerprint; the NVIDIA driver (the image's own when
# `nvidia-smi -L` works, else the distribution's packages); then Docker's nvidia runtime.
# Every value below is decided in src/bootstrap/steps/gpu.rs. With HVD_GPU_FUNCTIONS_ONLY=1 the
# script only defines its functions (tests/gpu_runtime.rs calls them one by one).
set -e
export DEBIAN_FRONTEND=noninteractive
HVD_GPU_KEY_URL={{ key_url | shell_quote }}
HVD_GPU_FINGERPRINT={{ fingerprint | shell_quote }}
HVD_GPU_KEYRING={{ keyring | shell_quote }}
HVD_GPU_LIST={{ list_file | shell_quote }}
HVD_GPU_LIST_LINE={{ list_line | shell_quote }}

# The driver plan of this node's release (HVD_GPU_*), or one line naming the release.
hvd_gpu_plan() {
  if [ ! -r /etc/os-release ]; then
    echo "hvd-cluster: the GPU runtime: this node has no /etc/os-release; GPU nodes must run {{ supported }}" >&2
    return 1
  fi
  # shellcheck disable=SC1091
  . /etc/os-release
  case "${ID:-}:${VERSION_ID:-}" in
{% for p in plans %}    {{ p.id | shell_quote }}:{{ p.version_id | shell_quote }})
      HVD_GPU_COMPONENTS=({% for c in p.components %}{{ c | shell_quote }} {% endfor %})
      HVD_GPU_SOURCES=({% for f in p.sources %}{{ f | shell_quote }} {% endfor %})
      HVD_GPU_PACKAGES=({% for x in p.packages %}{{ x | shell_quote }} {% endfor %})
      HVD_GPU_KERNEL_HEADERS={% if p.kernel_headers %}1{% else %}0{% endif %}
      HVD_GPU_UBUNTU_DRIVER={{ p.ubuntu_driver | shell_quote }}
      HVD_GPU_AFTER=({% for x in p.after %}{{ x | shell_quote }} {% endfor %}) ;;
{% endfor %}    *)
      echo "hvd-cluster: the GPU runtime: this node runs ${PRETTY_NAME:-an unknown system} (ID=${ID:-none} VERSION_ID=${VERSION_ID:-none}); GPU nodes must run {{ supported }}" >&2
      return 1 ;;
  esac
}

hvd_gpu_unconfigure() {
  rm -f "$HVD_GPU_LIST" "$HVD_GPU_KEYRING" "$HVD_GPU_LIST.hvd-new" "$HVD_GPU_KEYRING.hvd-new"
}

# NVIDIA's repository: the key is downloaded into a scratch keyring, and only when its one
# primary key has the expected fingerprint is that key (exported alone) installed as the
# keyring the source line names. Otherwise: one line, and no source or keyring is left.
hvd_gpu_repo() {
  hvd_apt_install curl gnupg ca-certificates
  local tmp found
  tmp=$(mktemp -d)
  mkdir -m 700 "$tmp/gnupg"
  if ! curl -fsSL --retry 3 --max-time 60 -o "$tmp/key" "$HVD_GPU_KEY_URL"; then
    rm -rf "$tmp"; hvd_gpu_unconfigure
    echo "hvd-cluster: cannot download the container toolkit's signing key from $HVD_GPU_KEY_URL; its repository is not configured" >&2
    return 1
  fi
  GNUPGHOME="$tmp/gnupg" gpg --batch --quiet --no-autostart --import "$tmp/key" >/dev/null 2>&1 || true
  found=$(GNUPGHOME="$tmp/gnupg" gpg --batch --no-autostart --with-colons --list-keys 2>/dev/null |
    awk -F: '$1 == "pub" { p = 1; next } $1 == "fpr" && p { print $10; p = 0 }' | tr '\n' ' ')
  found=${found% }
  if [ "$found" != "$HVD_GPU_FINGERPRINT" ]; then
    rm -rf "$tmp"; hvd_gpu_unconfigure
    echo "hvd-cluster: the signing key at $HVD_GPU_KEY_URL is ${found:-no OpenPGP key}, not the expected $HVD_GPU_FINGERPRINT: not trusted; NVIDIA's repository is not configured and nothing was installed from it" >&2
    return 1
  fi
  GNUPGHOME="$tmp/gnupg" gpg --batch --no-autostart --export "$HVD_GPU_FINGERPRINT" > "$tmp/keyring"
  install -m 644 "$tmp/keyring" "$HVD_GPU_KEYRING.hvd-new"
  mv -f "$HVD_GPU_KEYRING.hvd-new" "$HVD_GPU_KEYRING"
  printf '%s\n' "$HVD_GPU_LIST_LINE" > "$HVD_GPU_LIST.hvd-new"
  chmod 644 "$HVD_GPU_LIST.hvd-new"
  mv -f "$HVD_GPU_LIST.hvd-new" "$HVD_GPU_LIST"
  rm -rf "$tmp"
  # the next install reads the package lists again, this source's included
  rm -f /run/hvd-cluster-apt-updated
}

# Adds COMPONENTs to every entry of FILE that carries `main`: deb822 `Components:` lines and
# classic `deb`/`deb-src` lines (a trailing comment stays at the end). A missing file, or
# one with nothing missing, is left as it is.
hvd_gpu_components() {  # FILE COMPONENT...
  local file=$1; shift
  [ -f "$file" ] || return 0
  HVD_WANT="$*" awk '
    BEGIN { n = split(ENVIRON["HVD_WANT"], want, " ") }
    {
      line = $0; comment = ""
      h = index(line, "#")
      if (h > 0) { comment = substr(line, h); line = substr(line, 1, h - 1) }
      nf = split(line, f, /[ \t]+/)
      main = 0
      for (j = 1; j <= nf; j++) if (f[j] == "main") main = 1
      if (main && (line ~ /^Components:/ || line ~ /^[ \t]*deb(-src)?[ \t]/)) {
        add = ""
        for (i = 1; i <= n; i++) {
          have = 0
          for (j = 1; j <= nf; j++) if (f[j] == want[i]) have = 1
          if (!have) add = add " " want[i]
        }
        if (add != "") {
          sub(/[ \t]+$/, "", line)
          $0 = line add (comment == "" ? "" : " " comment)
        }
      }
      print
    }' "$file" > "$file.hvd-new"
  if cmp -s "$file.hvd-new" "$file"; then rm -f "$file.hvd-new"; else
    echo "enabling $* in $file" >&2
    cat "$file.hvd-new" > "$file" && rm -f "$file.hvd-new"
    rm -f /run/hvd-cluster-apt-updated
  fi
}

# The driver packages to install (HVD_GPU_INSTALL): the plan's, and where DKMS builds the
# module, the running kernel's headers. A stock image is often older than its archive, which
# keeps only the newest kernel's headers: then the newest kernel of the running one's flavour
# and its headers (6.1.0-9-cloud-amd64: linux-image-cloud-amd64 linux-headers-cloud-amd64),
# and the node reboots into it (hvd_gpu_loaded).
hvd_gpu_packages() {
  HVD_GPU_INSTALL=("${HVD_GPU_PACKAGES[@]}")
  [ "$HVD_GPU_KERNEL_HEADERS" = 1 ] || return 0
  local running flavour
  running=$(uname -r)
  if hvd_apt_update && apt-cache show "linux-headers-$running" >/dev/null 2>&1; then
    HVD_GPU_INSTALL+=("linux-headers-$running")
    return 0
  fi
  # Debian's kernel releases: VERSION-ABI-FLAVOUR
  flavour=$(printf '%s' "$running" | sed -n 's/^[0-9][0-9.]*-[0-9][0-9]*-\([a-z0-9][a-z0-9-]*\)$/\1/p')
  if [ -z "$flavour" ]; then
    HVD_GPU_INSTALL+=("linux-headers-$running")
    return 0
  fi
  echo "the archive no longer has the running kernel's headers (linux-headers-$running): installing the newest $flavour kernel and its headers; the node reboots into it" >&2
  HVD_GPU_INSTALL+=("linux-image-$flavour" "linux-headers-$flavour")
}

# The driver: the image's own when `nvidia-smi -L` works; else the plan's packages from the
# distribution's archive, its components enabled first.
hvd_gpu_driver() {
  if nvidia-smi -L >/dev/null 2>&1; then return 0; fi
  local f
  for f in "${HVD_GPU_SOURCES[@]}"; do hvd_gpu_components "$f" "${HVD_GPU_COMPONENTS[@]}"; done
  hvd_gpu_packages
  hvd_apt_install "${HVD_GPU_INSTALL[@]}"
  if [ -n "$HVD_GPU_UBUNTU_DRIVER" ]; then
    echo "ubuntu-drivers install --gpgpu $HVD_GPU_UBUNTU_DRIVER" >&2
    ubuntu-drivers install --gpgpu "$HVD_GPU_UBUNTU_DRIVER" >/dev/null
  fi
  [ -z "${HVD_GPU_AFTER[*]}" ] || hvd_apt_install "${HVD_GPU_AFTER[@]}"
}

# The toolkit from NVIDIA's repository, registered with Docker.
hvd_gpu_toolkit() {
  hvd_apt_install nvidia-container-toolkit
  nvidia-ctk runtime configure --runtime=docker >/dev/null
  hvd_service restart docker
}

# A driver installed just now may need a reboot to load (nouveau holds the GPU, or the module
# was built for a newer kernel than the running one): that is said with its own exit code, and
# hvd-cluster reboots the node and runs the bootstrap again (the line says why, not what to do).
# Secure Boot refusing an unsigned (DKMS-built) module is not mended by a reboot: said apart.
hvd_gpu_loaded() {
  nvidia-smi -L >/dev/null 2>&1 && return 0
  local why
  why=$(modprobe nvidia 2>&1) && nvidia-smi -L >/dev/null 2>&1 && return 0
  case $why in
    *"Key was rejected"*)
      echo "hvd-cluster: the NVIDIA kernel module is refused by Secure Boot (unsigned): enrol its signing key (mokutil --import /var/lib/dkms/mok.pub, then a reboot) or turn Secure Boot off for this node" >&2
      exit 1 ;;
  esac
  echo "{{ reboot_marker }} the NVIDIA driver and the container toolkit are installed, but the driver does not load in the running kernel ($(uname -r)) before the node reboots" >&2
  exit {{ reboot_exit }}
}

if [ "${HVD_GPU_FUNCTIONS_ONLY:-0}" != 1 ]; then
  hvd_gpu_plan
  hvd_gpu_repo
  hvd_gpu_driver
  hvd_gpu_toolkit
  hvd_gpu_loaded
fi
