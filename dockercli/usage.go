package dockercli

// Usage is what `docker run --help` prints under the name docker.
const Usage = `Usage:  docker run [OPTIONS] IMAGE COMMAND [ARG...]

rljail standing in for docker run: COMMAND runs in a throwaway rljail jail
on the root filesystem IMAGE maps to (no network, read-only root, no
capabilities, limits always on). See man rljail and docs/docker.md.

Honoured:
  --rm, --read-only, --init, -q, --cap-drop, --security-opt no-new-privileges
                          what the jail always does
  -i, --interactive       pass stdin (without it the payload's stdin is empty)
  --network none          the only network (none is also the default)
  -m, --memory BYTES      memory limit (--memory-swap only equal to it)
  --cpus N                CPU share
  --pids-limit N          most processes and threads
  -u, --user 65534|nobody|1000
                          the jail's one unprivileged user (uid 1000 inside)
  -v, --volume SRC:DST[:ro|rw]
  --mount type=bind,source=SRC,target=DST[,readonly]
                          grant a host path (writable unless ro, as in docker)
  --tmpfs /tmp[:size=N]   size of the jail's /tmp (and /dev/shm)
  -e, --env K[=V], --env-file FILE, -w, --workdir DIR
  --stop-timeout SECONDS  grace after a stop signal before the kill
  --ulimit nofile=N|fsize=N|cpu=N
  --entrypoint CMD, --name NAME, --pull missing|never, --platform linux/amd64

rljail's own:
  --rljail-images FILE    image mapping file (default: the user's
                          $XDG_CONFIG_HOME/rljail/images.toml, then
                          /etc/rljail/images.toml)
  --rljail-timeout D      rljail's kill timer (default 10m; exit 137)
  --rljail-profile P      seccomp profile (rljail profiles list)
  --rljail-result FILE    write rljail's JSON report
  --rljail-verbose        one summary line of the run on stderr

Every other flag of docker run is refused with one line saying why (exit 125).
`
