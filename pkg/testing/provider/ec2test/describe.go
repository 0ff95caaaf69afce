package ec2test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

func (s *Server) describeInstances(req request) (any, *Error) {
	if err := s.authorize("ec2:DescribeInstances", nil); err != nil {
		return nil, err
	}
	match, err := filters(req)
	if err != nil {
		return nil, err
	}
	var shown []*instance
	if ids := list(req.form, "InstanceId"); len(ids) > 0 {
		for _, id := range ids {
			in, ok := s.instances[id]
			if !ok || in.region != req.region || !in.Shown() {
				return nil, notFound(id)
			}
			if match(in) {
				shown = append(shown, in)
			}
		}
	} else {
		for _, id := range s.order {
			if in := s.instances[id]; in.region == req.region && in.Shown() && match(in) {
				shown = append(shown, in)
			}
		}
	}
	start, size := 0, s.opts.pageSize
	if t := req.form.Get("NextToken"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(shown) {
			return nil, invalid("The nextToken '%s' is not valid", t)
		}
		start = n
	}
	if m, err := strconv.Atoi(req.form.Get("MaxResults")); err == nil && m < size {
		if m < 5 || m > 1000 {
			return nil, invalid("MaxResults must be between 5 and 1000")
		}
		size = m
	}
	end := min(start+size, len(shown))
	resp := describeInstancesResponse{Xmlns: namespace, RequestID: req.requestID}
	for _, in := range shown[start:end] {
		resp.Reservations = append(resp.Reservations, s.reservation(in))
		s.step(in)
	}
	if end < len(shown) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// filters are DescribeInstances' filters the provider uses.
func filters(req request) (func(*instance) bool, *Error) {
	fs, err := parseFilters(req, "instance-state-name", "instance.group-id")
	if err != nil {
		return nil, err
	}
	return func(in *instance) bool {
		return fs.match(in.tags, func(name string) []string {
			if name == "instance.group-id" {
				return in.securityGroups
			}
			return []string{in.state}
		})
	}, nil
}

// filterSet is a request's Filter.N.Name / Filter.N.Value.M.
type filterSet []struct {
	name   string
	values []string
}

// parseFilters reads a request's filters; tag:KEY and the names given are
// known, any other is refused as EC2 does.
func parseFilters(req request, known ...string) (filterSet, *Error) {
	var fs filterSet
	for i := 1; req.form.Has(fmt.Sprintf("Filter.%d.Name", i)); i++ {
		name := req.form.Get(fmt.Sprintf("Filter.%d.Name", i))
		if !slices.Contains(known, name) && !strings.HasPrefix(name, "tag:") {
			return nil, invalid("The filter '%s' is invalid", name)
		}
		fs = append(fs, struct {
			name   string
			values []string
		}{name, list(req.form, fmt.Sprintf("Filter.%d.Value", i))})
	}
	return fs, nil
}

// match: for every filter, one of the resource's values (a tag's, or what
// valuesOf gives for other names) is among the filter's.
func (fs filterSet) match(tags map[string]string, valuesOf func(name string) []string) bool {
	for _, f := range fs {
		var have []string
		if key, isTag := strings.CutPrefix(f.name, "tag:"); isTag {
			if v, ok := tags[key]; ok {
				have = []string{v}
			}
		} else {
			have = valuesOf(f.name)
		}
		if !slices.ContainsFunc(have, func(v string) bool { return slices.Contains(f.values, v) }) {
			return false
		}
	}
	return true
}

func (s *Server) terminateInstances(req request) (any, *Error) {
	ids := list(req.form, "InstanceId")
	if len(ids) == 0 {
		return nil, &Error{Status: 400, Code: "MissingParameter", Message: "The request must contain the parameter InstanceId"}
	}
	resp := terminateInstancesResponse{Xmlns: namespace, RequestID: req.requestID}
	var found []*instance
	for _, id := range ids {
		in, ok := s.instances[id]
		if !ok || in.region != req.region || !in.Shown() {
			return nil, notFound(id)
		}
		arn := fmt.Sprintf("arn:aws:ec2:%s:%s:instance/%s", in.region, AccountID, in.id)
		if err := s.authorize("ec2:TerminateInstances", resourceTags(in.tags), arn); err != nil {
			return nil, err
		}
		found = append(found, in)
	}
	for _, in := range found {
		change := xmlStateChange{InstanceID: in.id, PreviousState: xmlState{Code: stateCodes[in.state], Name: in.state}}
		if in.state != "terminated" && in.state != "shutting-down" {
			in.state, in.stepsLeft, in.reason = "shutting-down", s.opts.steps, "Client.UserInitiatedShutdown"
			s.haltIfDown(in)
		}
		change.CurrentState = xmlState{Code: stateCodes[in.state], Name: in.state}
		resp.Instances = append(resp.Instances, change)
	}
	return resp, nil
}

// spotRequestID is the ID of a Spot instance's request.
func spotRequestID(instanceID string) string { return "sir-" + instanceID[len(instanceID)-8:] }

func (s *Server) describeSpotInstanceRequests(req request) (any, *Error) {
	if err := s.authorize("ec2:DescribeSpotInstanceRequests", nil); err != nil {
		return nil, err
	}
	resp := describeSpotInstanceRequestsResponse{Xmlns: namespace, RequestID: req.requestID}
	for _, id := range list(req.form, "SpotInstanceRequestId") {
		var found *instance
		for _, in := range s.instances {
			if in.spot && in.region == req.region && spotRequestID(in.id) == id {
				found = in
			}
		}
		if found == nil {
			return nil, &Error{Status: 400, Code: "InvalidSpotInstanceRequestID.NotFound", Message: fmt.Sprintf("The spot instance request ID '%s' does not exist", id)}
		}
		resp.Requests = append(resp.Requests, xmlSpotRequest{
			ID: id, InstanceID: found.id, State: "active", Type: "one-time",
			Status: xmlSpotStatus{Code: found.spotStatus, Message: "status " + found.spotStatus},
		})
	}
	return resp, nil
}

// resourceTags is the ec2:ResourceTag/ condition context of an instance.
func resourceTags(tags map[string]string) map[string][]string {
	ctx := map[string][]string{}
	for k, v := range tags {
		ctx["ec2:ResourceTag/"+k] = []string{v}
	}
	return ctx
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
