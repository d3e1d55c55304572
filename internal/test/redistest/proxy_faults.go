package redistest

// DropConnections closes every connection open through the proxy now, on
// both sides, as a network blip or a load balancer resetting its
// connections would. New connections are served as usual; go-redis
// retries a command whose connection broke on a new one.
func (p *Proxy) DropConnections() { p.closeAll() }

// SetDropping turns connection dropping on or off. While it is on, the
// proxy drops every connection: the open ones at once, new ones as soon
// as they are accepted, before any byte reaches the server. Clients see
// their connections reset or closed, not a slow server.
func (p *Proxy) SetDropping(on bool) {
	p.dropAll.Store(on)
	if on {
		p.DropConnections()
	}
}
