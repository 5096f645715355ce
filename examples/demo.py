"""What jailed code sees: run with `make demo` or `bin/rljail -- python3 examples/demo.py`.

It performs the sandbox acceptance check of the Agent Wranglers application
security playbook, rule APS-91 (CC BY 4.0):
https://agentwranglers.se/playbook/application-security/ai-features-and-agents/sandbox-model-code
"""
import os
import socket
import time

print("uid/gid:      ", os.getuid(), os.getgid())
print("hostname:     ", open("/etc/hostname").read().strip())
print("environment:  ", sorted(os.environ))
print("working dir:  ", os.getcwd(), sorted(os.listdir("."))[:5], "...")
print("processes:    ", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))

try:
    socket.getaddrinfo("test.example.org", 443)
    print("DNS:           resolved (unexpected)")
except OSError as e:
    print("DNS:           fails:", e)
try:
    socket.create_connection(("1.1.1.1", 443), timeout=2)
    print("network:       connected (unexpected)")
except OSError as e:
    print("network:       fails:", e)
try:
    open("/workspace/written-by-jail", "w")
    print("workspace:     writable (unexpected)")
except OSError as e:
    print("workspace:     read-only:", e.strerror)
with open("/tmp/scratch", "w") as f:
    f.write("ok")
print("/tmp:          writable scratch")

print("now looping forever; the kill timer ends it (exit status 124)", flush=True)
while True:
    time.sleep(0.1)
