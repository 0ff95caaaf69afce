package store

// selectionOrder lists the proxies an acquire may choose, in selection
// order (selectedBefore): the Ready ones with a free slot, and no others,
// so that an acquire takes the first acceptable proxy without walking past
// the ones that are full (docs/decisions/0113-selection-orders-hold-only-proxies-acquire.md). The links live in the proxies
// (allLinks for the store's order, nsLinks for a namespace's), so that a
// proxy leaving when its last slot is taken and coming back at its release
// allocates nothing.
type selectionOrder struct {
	front, back *proxyState
	n           int
	// byNamespace: this order uses nsLinks, else allLinks.
	byNamespace bool
}

// orderLinks are a proxy's place in one selectionOrder.
type orderLinks struct {
	prev, next *proxyState
	in         bool
}

func (o *selectionOrder) links(p *proxyState) *orderLinks {
	if o.byNamespace {
		return &p.nsLinks
	}
	return &p.allLinks
}

func (o *selectionOrder) next(p *proxyState) *proxyState { return o.links(p).next }

// insert places p in order. It walks from the back because the usual
// insert is a proxy just released, which belongs at (or next to) the back.
func (o *selectionOrder) insert(p *proxyState) {
	var after *proxyState
	for m := o.back; m != nil; m = o.links(m).prev {
		if !selectedBefore(p, m) {
			after = m
			break
		}
	}
	l := o.links(p)
	l.in = true
	if after == nil {
		l.prev, l.next = nil, o.front
		if o.front != nil {
			o.links(o.front).prev = p
		} else {
			o.back = p
		}
		o.front = p
	} else {
		al := o.links(after)
		l.prev, l.next = after, al.next
		if al.next != nil {
			o.links(al.next).prev = p
		} else {
			o.back = p
		}
		al.next = p
	}
	o.n++
}

func (o *selectionOrder) remove(p *proxyState) {
	l := o.links(p)
	if l.prev != nil {
		o.links(l.prev).next = l.next
	} else {
		o.front = l.next
	}
	if l.next != nil {
		o.links(l.next).prev = l.prev
	} else {
		o.back = l.prev
	}
	*l = orderLinks{}
	o.n--
}
