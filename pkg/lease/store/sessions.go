package store

import (
	"container/list"
	"time"
)

// Sticky sessions: a session remembers the proxy it chose, so that its
// next acquire gets the same one while it is Ready, free and acceptable,
// and joins the session's live lease while there is one. A session's key
// holds the identity that acquired with it (AcquireRequest.Owner), the
// acquire's namespace and the session name: a name is chosen by the
// client, so another identity using the same one has a session of its own
// (docs/decisions/0220-gateway-session-belongs-to-its-caller.md).
//
// Sessions are bounded by Config.MaxSessions, kept least recently used
// last: a new session beyond the cap evicts the least recently used one (a
// session only makes a choice sticky, so forgetting one costs stickiness,
// nothing else), and idle ones expire from the same end after
// Config.SessionIdle.

type sessionKey struct {
	owner     string
	namespace string
	session   string
}

type session struct {
	key      sessionKey
	proxy    ObjectName
	lastUsed time.Time
	elem     *list.Element // in sessions.lru
}

// sessions is the policy.
type sessions struct {
	noDecision
	byKey   map[sessionKey]*session
	lru     *list.List // most recently used first
	max     int
	idle    time.Duration
	metrics Metrics
}

func newSessions(cfg Config) *sessions {
	return &sessions{byKey: map[sessionKey]*session{}, lru: list.New(), max: cfg.MaxSessions, idle: cfg.SessionIdle, metrics: cfg.Metrics}
}

// chosen is the proxy session key chose last, if it is remembered.
func (ss *sessions) chosen(key sessionKey) (ObjectName, bool) {
	if sess := ss.byKey[key]; sess != nil {
		return sess.proxy, true
	}
	return ObjectName{}, false
}

// installed: a grant with a session makes its proxy the session's choice;
// a lease relearnt by a new leader does when the session has chosen
// nothing on this leader yet, so that its next acquire joins it.
func (ss *sessions) installed(l *lease, how install) {
	if l.session == "" {
		return
	}
	key := sessionKey{l.owner, l.sessionScope, l.session}
	if !how.grant && ss.byKey[key] != nil {
		return
	}
	ss.use(key, l.proxyKey, how.at)
}

func (*sessions) ended(*lease)            {}
func (*sessions) forget(ObjectName, bool) {}
func (*sessions) termEnded()              {}
func (*sessions) promoted(time.Duration)  {}

// renewed: a renewal of a session's lease on the proxy it chose uses it.
func (ss *sessions) renewed(l *lease, at time.Time) {
	if l.session == "" {
		return
	}
	if sess := ss.byKey[sessionKey{l.owner, l.sessionScope, l.session}]; sess != nil && sess.proxy == l.proxyKey {
		ss.use(sess.key, sess.proxy, at)
	}
}

// use records that key chose proxy at the time at.
func (ss *sessions) use(key sessionKey, proxy ObjectName, at time.Time) {
	if sess := ss.byKey[key]; sess != nil {
		sess.proxy, sess.lastUsed = proxy, at
		ss.lru.MoveToFront(sess.elem)
		return
	}
	for len(ss.byKey) >= ss.max {
		ss.drop(ss.lru.Back().Value.(*session).key)
		observeEviction(ss.metrics, StateSessions)
	}
	sess := &session{key: key, proxy: proxy, lastUsed: at}
	sess.elem = ss.lru.PushFront(sess)
	ss.byKey[key] = sess
	setStateEntries(ss.metrics, StateSessions, len(ss.byKey))
}

// drop forgets key's choice.
func (ss *sessions) drop(key sessionKey) {
	sess := ss.byKey[key]
	if sess == nil {
		return
	}
	ss.lru.Remove(sess.elem)
	delete(ss.byKey, key)
	setStateEntries(ss.metrics, StateSessions, len(ss.byKey))
}

// due is the drop of the least recently used session when it has been
// idle for longer than Config.SessionIdle at now, nil otherwise.
func (ss *sessions) due(now time.Time) Effect {
	if e := ss.lru.Back(); e != nil {
		if sess := e.Value.(*session); now.Sub(sess.lastUsed) > ss.idle {
			return SessionDrop{key: sess.key, idle: true}
		}
	}
	return nil
}
