package dockercli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recipe is the sandbox rule's shell example (APS-91 of the Agent
// Wranglers application security playbook, CC BY 4.0:
// https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code),
// with $PWD/task written out.
var recipe = []string{"--rm", "--network", "none", "--read-only", "--memory", "256m", "--cpus", "0.5", "--pids-limit", "64",
	"--user", "65534", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
	"-v", "/w/task:/task:ro", "sandbox-image", "timeout", "10", "python", "/task/main.py"}

// recipeArgs is what the recipe becomes in rljail's flags.
var recipeArgs = []string{"-v", "/w/task:/task:ro", "--network", "none", "--cpus", "0.5", "--pids-limit", "64", "--memory", "256m", "--timeout", DefaultTimeout, "--no-workspace"}

func TestParseSpellings(t *testing.T) {
	cmd := []string{"timeout", "10", "python", "/task/main.py"}
	for _, tc := range []struct {
		name string
		args []string
		want []string // Args, without --timeout and --no-workspace
	}{
		{"recipe", recipe[:len(recipe)-4], recipeArgs[:len(recipeArgs)-3]},
		{"equals", []string{"--rm=true", "--network=none", "--read-only", "--memory=256m", "--cpus=0.5", "--pids-limit=64", "--user=65534", "--cap-drop=ALL", "--security-opt=no-new-privileges", "--volume=/w/task:/task:ro", "sandbox-image"},
			[]string{"-v", "/w/task:/task:ro", "--network", "none", "--cpus", "0.5", "--pids-limit", "64", "--memory", "256m"}},
		{"short", []string{"-m", "256m", "-u", "nobody:nogroup", "-v", "/w/task:/task:ro", "sandbox-image"},
			[]string{"-v", "/w/task:/task:ro", "--memory", "256m"}},
		{"short attached", []string{"-m256m", "-v/w/task:/task:ro", "-eA=1", "-e=B=2", "sandbox-image"},
			[]string{"-v", "/w/task:/task:ro", "-e", "A=1", "-e", "B=2", "--memory", "256m"}},
		{"combined bools", []string{"-i", "--init", "-qi", "sandbox-image"}, nil},
		{"combined with value", []string{"-im", "1g", "sandbox-image"}, []string{"--memory", "1g"}},
		{"other order", []string{"--security-opt", "no-new-privileges:true", "--cap-drop", "all", "-v", "/w/task:/task:ro", "--pids-limit", "64", "--user", "65534:65534", "--cpus", "0.5", "--memory", "256m", "--read-only", "--network", "none", "--rm", "sandbox-image"},
			[]string{"-v", "/w/task:/task:ro", "--pids-limit", "64", "--cpus", "0.5", "--network", "none", "--memory", "256m"}},
		{"last wins", []string{"-m", "1g", "--memory", "256m", "--cpus", "2", "--cpus=0.5", "sandbox-image"}, []string{"--cpus", "0.5", "--memory", "256m"}},
		{"double dash", []string{"--rm", "--", "sandbox-image"}, nil},
		{"memory-swap equal", []string{"--memory", "256m", "--memory-swap", "268435456", "sandbox-image"}, []string{"--memory", "256m"}},
		{"volume rw default", []string{"-v", "/data:/data", "--volume", "/x:/y:rw,rprivate", "sandbox-image"}, []string{"-v", "/data:/data:rw", "-v", "/x:/y:rw"}},
		{"mount bind", []string{"--mount", "type=bind,source=/w/task,target=/task,readonly", "--mount", "type=bind,src=/out,dst=/out", "sandbox-image"},
			[]string{"-v", "/w/task:/task:ro", "-v", "/out:/out:rw"}},
		{"mount readonly false", []string{"--mount", "type=bind,source=/o,target=/o,readonly=false", "sandbox-image"}, []string{"-v", "/o:/o:rw"}},
		{"tmpfs", []string{"--tmpfs", "/tmp:rw,size=128m,mode=1777", "sandbox-image"}, []string{"--tmp-size", "128m"}},
		{"mount tmpfs", []string{"--mount", "type=tmpfs,target=/tmp,tmpfs-size=32m", "sandbox-image"}, []string{"--tmp-size", "32m"}},
		{"env", []string{"-e", "A=1", "--env", "B", "--env-file", "/e.env", "sandbox-image"}, []string{"-e", "A=1", "-e", "B", "--env-file", "/e.env"}},
		{"workdir", []string{"-w", "/task", "sandbox-image"}, []string{"--workdir", "/task"}},
		{"stop-timeout", []string{"--stop-timeout", "3", "sandbox-image"}, []string{"--stop-grace", "3s"}},
		{"ulimit", []string{"--ulimit", "nofile=100:200", "--ulimit", "fsize=1048576", "--ulimit", "cpu=5", "sandbox-image"},
			[]string{"--nofile", "100", "--file-size", "1048576", "--cpu-time", "5s"}},
		{"accepted", []string{"--name", "job-1", "--pull", "never", "--platform", "linux/amd64", "--restart", "no", "--ipc", "private", "--init", "--no-healthcheck", "-d=false", "-t=false", "--privileged=false", "sandbox-image"}, nil},
		{"rljail's own", []string{"--rljail-profile", "python-strict", "--rljail-result", "/r.json", "--rljail-verbose", "sandbox-image"},
			[]string{"--profile", "python-strict", "--result", "/r.json", "--verbose", "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(append(slices.Clone(tc.args), cmd...))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tail := []string{"--timeout", DefaultTimeout, "--no-workspace"}
			if !slices.Equal(r.Args[len(r.Args)-3:], tail) {
				t.Fatalf("Args %q do not end in %q", r.Args, tail)
			}
			if got := r.Args[:len(r.Args)-3]; !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("Args\n got %q\nwant %q", got, tc.want)
			}
			if r.Image != "sandbox-image" || !slices.Equal(r.Command, cmd) {
				t.Errorf("image %q, command %q", r.Image, r.Command)
			}
		})
	}
}

func TestParseShape(t *testing.T) {
	r, err := Parse([]string{"-i", "--entrypoint", "python3", "--rljail-images", "/i.toml", "--rljail-timeout", "30s", "python:3.11", "-c", "print(1)", "--rm", "-v", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interactive || r.ImagesFile != "/i.toml" || r.Timeout != "30s" || r.Image != "python:3.11" {
		t.Errorf("got %+v", r)
	}
	// Everything after the image is the command, flags or not.
	if want := []string{"python3", "-c", "print(1)", "--rm", "-v", "x"}; !slices.Equal(r.Command, want) {
		t.Errorf("command %q, want %q", r.Command, want)
	}
	if !slices.Contains(r.Args, "30s") {
		t.Errorf("--rljail-timeout is not rljail's --timeout: %q", r.Args)
	}
	if r, err := Parse([]string{"--help"}); err != nil || !r.Help {
		t.Errorf("--help: %+v, %v", r, err)
	}
	if r, _ := Parse([]string{"sandbox-image", "true"}); r.Interactive {
		t.Errorf("stdin passes without -i")
	}
}

// TestParseRefused: every refused flag is refused with one sentence that
// names it and says why.
func TestParseRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole message, or its start when it ends in "..."
	}{
		{[]string{"--privileged"}, "--privileged is not supported: it would give the payload every capability and the host's devices; the jail is never weakened"},
		{[]string{"--cap-add", "SYS_ADMIN"}, "--cap-add is not supported: the payload never has a capability"},
		{[]string{"--cap-add=NET_RAW"}, "--cap-add is not supported: the payload never has a capability"},
		{[]string{"--network", "host"}, "--network host is not supported: the jail has no network (an empty network namespace with only lo); none is the only mode"},
		{[]string{"--network=bridge"}, "--network bridge is not supported: the jail has no network..."},
		{[]string{"--net", "container:db"}, "--net container:db is not supported: the jail has no network..."},
		{[]string{"--pid", "host"}, "--pid host is not supported: the jail always has a PID namespace of its own"},
		{[]string{"--ipc=host"}, "--ipc host is not supported: the jail always has a IPC namespace of its own"},
		{[]string{"--uts", "host"}, "--uts host is not supported: the jail always has a UTS namespace of its own"},
		{[]string{"--userns", "host"}, "--userns host is not supported: the jail always has a user namespace of its own"},
		{[]string{"--cgroupns", "host"}, "--cgroupns host is not supported: the jail always has a cgroup namespace of its own"},
		{[]string{"--security-opt", "seccomp=unconfined"}, "--security-opt seccomp=unconfined is not supported: the jail's seccomp profile is always on; rljail's own profiles are chosen with --rljail-profile NAME|FILE"},
		{[]string{"--security-opt", "seccomp:/p.json"}, "--security-opt seccomp:/p.json is not supported: the jail's seccomp profile is always on..."},
		{[]string{"--security-opt", "apparmor=unconfined"}, "--security-opt apparmor=unconfined is not supported: rljail sets no AppArmor profile..."},
		{[]string{"--security-opt", "label=disable"}, "--security-opt label=disable is not supported: rljail sets no AppArmor profile..."},
		{[]string{"--security-opt", "systempaths=unconfined"}, "--security-opt systempaths=unconfined is not supported: the jail's /proc is always masked"},
		{[]string{"--security-opt", "no-new-privileges=false"}, "--security-opt no-new-privileges=false is not supported: the payload always runs with no_new_privs"},
		{[]string{"-p", "8080:80"}, "-p is not supported: the jail has no network (an empty network namespace with only lo) to publish a port on"},
		{[]string{"--publish=80"}, "--publish is not supported: the jail has no network..."},
		{[]string{"-P"}, "-P is not supported: the jail has no network..."},
		{[]string{"--device", "/dev/kvm"}, "--device is not supported: the jail gets no host devices"},
		{[]string{"--gpus", "all"}, "--gpus is not supported: the jail gets no host devices"},
		{[]string{"-d"}, "-d is not supported: rljail runs a jail in the foreground only; a persistent jail is `rljail session`"},
		{[]string{"--detach"}, "--detach is not supported: rljail runs a jail in the foreground only; a persistent jail is `rljail session`"},
		{[]string{"-id"}, "-d is not supported: rljail runs a jail in the foreground only..."},
		{[]string{"-it"}, "-t is not supported: rljail gives the payload no terminal (docker's -t would make one inside); leave it out: -i alone passes stdin (python3 -i shows its prompt without a terminal)"},
		{[]string{"-t"}, "-t is not supported: rljail gives the payload no terminal..."},
		{[]string{"--tty"}, "--tty is not supported: rljail gives the payload no terminal..."},
		{[]string{"--rm=false"}, "--rm=false is not supported: every jail is removed when it ends"},
		{[]string{"--read-only=false"}, "--read-only=false is not supported: the jail's root filesystem is always read-only (its /tmp is a writable tmpfs)"},
		{[]string{"--user", "0"}, "--user 0 is not supported: the payload never runs as root, not even the jail's own"},
		{[]string{"-u", "root"}, "-u root is not supported: the payload never runs as root..."},
		{[]string{"--user", "65534:0"}, "--user 65534:0 is not supported: the payload never runs as root..."},
		{[]string{"--user", "1234"}, "--user 1234 is not supported: the payload always runs as the jail's one unprivileged user (uid 1000 inside); --user 65534 (nobody) or 1000 names it"},
		{[]string{"--memory-swap", "1g", "-m", "256m"}, "--memory-swap 1g is not supported: the jail has no swap: give it equal to --memory, or leave it out"},
		{[]string{"--memory-swap=-1", "-m", "256m"}, "--memory-swap -1 is not supported: the jail has no swap..."},
		{[]string{"--memory-swap", "256m"}, "--memory-swap is not supported: it needs --memory, which it must equal: the jail has no swap"},
		{[]string{"--pids-limit", "-1"}, "--pids-limit -1 is not supported: the jail's processes are always limited; give a positive number"},
		{[]string{"--pids-limit=0"}, "--pids-limit 0 is not supported: the jail's processes are always limited..."},
		{[]string{"--oom-kill-disable"}, "--oom-kill-disable is not supported: the memory limit always ends the jail"},
		{[]string{"--sysctl", "net.ipv4.ip_forward=1"}, "--sysctl is not supported: the jail's kernel settings are rljail's"},
		{[]string{"-v", "data:/data"}, "-v data is not supported: named volumes do not exist in rljail: give a host path (absolute, or starting with ./ or ../)"},
		{[]string{"-v", ".venv:/v"}, "-v .venv is not supported: named volumes do not exist in rljail..."},
		{[]string{"-v", "/data"}, "-v /data is not supported: anonymous volumes do not exist in rljail..."},
		{[]string{"-v", "/a:/b:rshared"}, "-v /a:/b:rshared is not supported: the jail's mounts never propagate to or from the host"},
		{[]string{"-v", "/a:/b:z"}, "-v /a:/b:z is not supported: rljail does not relabel host files for SELinux"},
		{[]string{"--mount", "type=volume,source=v,target=/v"}, "--mount type=volume,source=v,target=/v is not supported: only type=bind (an absolute host path) and type=tmpfs (at /tmp) are supported"},
		{[]string{"--mount", "source=/a,target=/b"}, "--mount source=/a,target=/b is not supported: only type=bind..."},
		{[]string{"--mount", "type=bind,source=/a,target=/b,bind-propagation=rshared"}, "--mount type=bind,source=/a,target=/b,bind-propagation=rshared is not supported: the jail's mounts never propagate..."},
		{[]string{"--tmpfs", "/run"}, "--tmpfs /run is not supported: the jail's one tmpfs that rljail sizes is /tmp (with /dev/shm); mount it there"},
		{[]string{"--tmpfs", "/tmp:noexec"}, "--tmpfs /tmp:noexec is not supported: the jail's /tmp is nosuid and nodev, but programs written there may run"},
		{[]string{"--ulimit", "nproc=10"}, "--ulimit nproc=10 is not supported: rljail's limits are --memory, --cpus, --pids-limit and --ulimit nofile, fsize and cpu"},
		{[]string{"--volumes-from", "db"}, "--volumes-from is not supported: every jail stands alone..."},
		{[]string{"--link", "db"}, "--link is not supported: every jail stands alone..."},
		{[]string{"--add-host", "a:1.2.3.4"}, "--add-host is not supported: the jail has no network..."},
		{[]string{"--dns", "8.8.8.8"}, "--dns is not supported: the jail has no network..."},
		{[]string{"-h", "box"}, "-h is not supported: the jail's host name is always rljail"},
		{[]string{"--sig-proxy=false"}, "--sig-proxy=false is not supported: rljail always passes the caller's SIGINT..."},
		{[]string{"--pull", "always"}, "--pull always is not supported: rljail pulls no images: it runs on its own root filesystems"},
		{[]string{"--platform", "linux/arm64"}, "--platform linux/arm64 is not supported: the jail runs on this host only"},
		{[]string{"--restart", "always"}, "--restart always is not supported: a jail runs once"},
		{[]string{"--use-api-socket"}, "--use-api-socket is not supported: the jail never gets the docker API socket"},
		{[]string{"--stop-timeout", "-1"}, "--stop-timeout -1 is not supported: a stopped jail is always killed after its grace; give seconds"},
		{[]string{"--cpu-quota", "50000"}, "--cpu-quota is not supported: use --cpus"},
		{[]string{"--cgroup-parent", "x"}, "--cgroup-parent is not supported: its meaning is docker's cgroup driver's; rljail's own flag is --cgroup-parent"},
		{[]string{"--bogus"}, "unknown flag: --bogus (see docker run --help; rljail's own flags there start with --rljail-)"},
		{[]string{"--memroy", "1g"}, "unknown flag: --memroy (did you mean --memory? see docker run --help; rljail's own flags there start with --rljail-)"},
		{[]string{"--rljail-timout", "5s"}, "unknown flag: --rljail-timout (did you mean --rljail-timeout? see docker run --help..."},
		{[]string{"-Z"}, `unknown shorthand flag: 'Z' in -Z (see docker run --help)`},
		{[]string{"--memory"}, "flag needs an argument: --memory"},
		{[]string{"--rm=maybe"}, `invalid argument "maybe" for --rm: it is true or false`},
		{nil, `"docker run" requires at least 1 argument: docker run [OPTIONS] IMAGE [COMMAND] [ARG...]`},
		{[]string{"--rm", "sandbox-image"}, "no command given after the image sandbox-image..."},
	} {
		args := tc.args
		if len(args) > 0 && !strings.HasPrefix(tc.want, "flag needs") && !strings.HasPrefix(tc.want, "no command") {
			args = append(slices.Clone(args), "sandbox-image", "true")
		}
		_, err := Parse(args)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: error %v, want a refusal", tc.args, err)
			continue
		}
		got := err.Error()
		if prefix, ok := strings.CutSuffix(tc.want, "..."); ok {
			if !strings.HasPrefix(got, prefix) {
				t.Errorf("%q:\n got %s\nwant %s", tc.args, got, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.args, got, tc.want)
		}
		if strings.Contains(got, "\n") {
			t.Errorf("%q: the message is more than one line: %q", tc.args, got)
		}
	}
}

// TestEveryFlagDecided: each flag of docker run's table is honoured or
// refused with a reason, never dropped silently.
func TestEveryFlagDecided(t *testing.T) {
	for _, f := range flagTable() {
		if f.rule == nil && f.why == "" {
			t.Errorf("--%s is refused without a reason", f.long)
		}
		arg := "--" + f.long
		if !f.value {
			arg += "=true"
		} else {
			arg += "=x"
		}
		_, err := Parse([]string{arg, "sandbox-image", "true"})
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "--"+f.long) {
			t.Errorf("%s: the error does not name the flag: %v", arg, err)
		}
	}
}

// issue 30: `-v ./task:/task:ro` was refused as a named volume; docker 23
// and later read a source starting with . as a host path, relative to the
// current directory, in -v and --mount alike.
func TestParseRelativeVolumes(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Dir(wd)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-v", "./task:/task:ro"}, []string{"-v", wd + "/task:/task:ro"}},
		{[]string{"-v", ".:/w"}, []string{"-v", wd + ":/w:rw"}},
		{[]string{"--volume=../out:/out:rw"}, []string{"-v", parent + "/out:/out:rw"}},
		{[]string{"-v", "..:/up:ro"}, []string{"-v", parent + ":/up:ro"}},
		{[]string{"-v", "./a/../b/:/b:ro"}, []string{"-v", wd + "/b:/b:ro"}},
		{[]string{"--mount", "type=bind,source=./task,target=/task,readonly"}, []string{"-v", wd + "/task:/task:ro"}},
	} {
		r, err := Parse(append(slices.Clone(tc.args), "sandbox-image", "true"))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if got := r.Args[:len(tc.want)]; !slices.Equal(got, tc.want) || !slices.Equal(r.Volumes, tc.want[1:]) {
			t.Errorf("%q: Args %q, Volumes %q; want %q", tc.args, r.Args, r.Volumes, tc.want)
		}
	}
}

// issue 30: a run without a timer of its own went on for ten minutes
// without a word; the notice says so, unless a timer was chosen.
func TestTimerNotice(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		notice bool
	}{
		{[]string{"sandbox-image", "python3", "-c", "while True: pass"}, true},
		{[]string{"--stop-timeout", "3", "sandbox-image", "python3"}, true},
		{[]string{"--rljail-timeout", "30s", "sandbox-image", "python3"}, false},
		{[]string{"--rljail-timeout", DefaultTimeout, "sandbox-image", "python3"}, false},
		{[]string{"sandbox-image", "timeout", "10", "python", "/task/main.py"}, false},
		{[]string{"sandbox-image", "/usr/bin/timeout", "10", "python3"}, false},
		{[]string{"--help"}, false},
	} {
		r, err := Parse(tc.args)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		n := r.TimerNotice()
		if (n != "") != tc.notice || strings.Contains(n, "\n") {
			t.Errorf("%q: notice %q, want one: %v", tc.args, n, tc.notice)
		}
		if n != "" && !strings.Contains(n, DefaultTimeout) {
			t.Errorf("%q: the notice %q does not name the timer %s", tc.args, n, DefaultTimeout)
		}
	}
}
