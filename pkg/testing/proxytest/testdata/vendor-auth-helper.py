#!/usr/bin/env python3
"""squid basic-auth helper for proxytest.StartVendorSquid: a proxy
network's login. Reads "username password" lines (each URL-escaped),
accepts only usernames that fullmatch PATTERN (one group: the session id)
with PASSWORD, and answers "OK exit=ipN": slot N, whose
tcp_outgoing_address (BASE + N) the session leaves from. New sessions take
the next slot in turn; the force file (lines "session ip") overrides.
Never prints the password.

Usage: vendor-auth-helper.py DIR [--check]
  DIR holds config (four lines: PATTERN, PASSWORD, SLOTS, BASE such as
  "127.0.9."), force (read at every request), and what it writes:
  sessions (lines "session ip", the last answer per session) and counts
  ("OK ERR"). --check only validates config, before squid starts.
"""
import os
import re
import sys
import urllib.parse


def main():
    state_dir = sys.argv[1]
    with open(os.path.join(state_dir, "config")) as f:
        pattern, password, slots, base = f.read().split("\n")[:4]
    pattern, slots = re.compile(pattern), int(slots)
    if pattern.groups != 1:
        sys.exit("vendor-auth-helper: the username pattern needs exactly one group (the session id), it has %d" % pattern.groups)
    if len(sys.argv) > 2 and sys.argv[2] == "--check":
        return
    # squid may restart a helper: it carries on from what the files say.
    sessions = {s: ip for s, ip in read_pairs(os.path.join(state_dir, "sessions"))}
    seen = len(sessions)  # sessions ever assigned: the next one takes slot seen % slots + 1
    counts = read_counts(os.path.join(state_dir, "counts"))
    for line in sys.stdin:
        parts = line.rstrip("\n").split(" ")
        user = urllib.parse.unquote(parts[0])
        given = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        m = pattern.fullmatch(user)
        if m is None or given != password:
            counts[1] += 1
            write_atomically(state_dir, "counts", "%d %d\n" % tuple(counts))
            reply('ERR message="unknown username or wrong password"')
            continue
        session = m.group(1)
        if session not in sessions:
            sessions[session] = "%s%d" % (base, seen % slots + 1)
            seen += 1
        ip = forced(state_dir, base, slots).get(session, sessions[session])
        sessions[session] = ip
        counts[0] += 1
        # Written before the answer, so a test that got its response reads them.
        write_atomically(state_dir, "sessions", "".join("%s %s\n" % kv for kv in sessions.items()))
        write_atomically(state_dir, "counts", "%d %d\n" % tuple(counts))
        reply("OK exit=ip%s" % ip[len(base):])


def forced(state_dir, base, slots):
    """Session -> exit IP from the force file (later lines win); lines
    naming no exit slot are ignored rather than crash the helper."""
    valid = {"%s%d" % (base, n) for n in range(1, slots + 1)}
    return {s: ip for s, ip in read_pairs(os.path.join(state_dir, "force")) if ip in valid}


def read_pairs(path):
    try:
        with open(path) as f:
            return [tuple(line.split()) for line in f if len(line.split()) == 2]
    except FileNotFoundError:
        return []


def read_counts(path):
    try:
        with open(path) as f:
            return [int(n) for n in f.read().split()[:2]]
    except FileNotFoundError:
        return [0, 0]


def write_atomically(state_dir, name, text):
    # The test reads these files at any moment: never a half-written one.
    tmp = os.path.join(state_dir, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(state_dir, name))


def reply(answer):
    sys.stdout.write(answer + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
