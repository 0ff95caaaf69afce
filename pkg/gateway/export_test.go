package gateway

// OpenSessionConnections counts the connections that sessions have open: a
// connection leaves its session only once its relay has finished, which may
// be after the client has read the whole answer.
func (g *Gateway) OpenSessionConnections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	open := 0
	for _, s := range g.sessions {
		s.mu.Lock()
		open += s.active
		s.mu.Unlock()
	}
	return open
}
