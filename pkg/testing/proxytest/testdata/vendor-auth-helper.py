#!/usr/bin/env python3
"""squid basic-auth helper for proxytest.StartVendorSquid: a proxy
network's login. Reads "username password" lines (URL-escaped), accepts
only usernames that fullmatch PATTERN (one group: the session id) with
PASSWORD, and answers "OK exit=ipN": the slot whose tcp_outgoing_address
the session leaves from. New sessions take the next slot in turn; the
force file (lines "session ip") overrides. Never prints the password.

Usage: vendor-auth-helper.py DIR
  DIR holds config (four lines: PATTERN, PASSWORD, SLOTS, BASE such as
  "127.0.9."), sessions (written) and force (read).
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
    # session -> slot index; squid runs one helper (children 1), which
    # picks up what an earlier one assigned.
    sessions = {session: int(ip[len(base):]) - 1 for session, ip in read_pairs(os.path.join(state_dir, "sessions"))}
    for line in sys.stdin:
        parts = line.rstrip("\n").split(" ")
        user = urllib.parse.unquote(parts[0])
        given = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        m = pattern.fullmatch(user)
        if m is None or given != password:
            reply('ERR message="unknown username or wrong password"')
            continue
        session = m.group(1)
        if session not in sessions:
            sessions[session] = len(sessions) % slots
            save(state_dir, sessions, base)
        slot = forced(state_dir, base).get(session, sessions[session])
        reply("OK exit=ip%d" % slot)


def forced(state_dir, base):
    """Session -> slot from the force file, read at every login."""
    return {session: int(ip[len(base):]) - 1 for session, ip in read_pairs(os.path.join(state_dir, "force"))}


def read_pairs(path):
    try:
        with open(path) as f:
            return [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def save(state_dir, sessions, base):
    tmp = os.path.join(state_dir, "sessions.tmp")
    with open(tmp, "w") as f:
        for session, slot in sessions.items():
            f.write("%s %s%d\n" % (session, base, slot + 1))
    os.rename(tmp, os.path.join(state_dir, "sessions"))


def reply(answer):
    sys.stdout.write(answer + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
