package ec2test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
)

// stateCodes are EC2's numeric instance state codes.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

// request is one parsed call.
type request struct {
	action    Action
	region    string
	form      url.Values
	requestID string
	// noCapacity: a random fault fails the launch for capacity, once its
	// client token is known to be new (randomFaults).
	noCapacity bool
	// policy authorizes the call: its signer's (nil: everything).
	policy *Policy
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.ParseForm() != nil {
		writeError(w, Error{Status: 400, Code: "InvalidRequest", Message: "EC2 takes form-encoded POSTs"}, "")
		return
	}
	req := request{action: Action(r.PostForm.Get("Action")), form: r.PostForm}
	keyID, region, err := credentialScope(r.Header.Get("Authorization"))
	policy, known := s.opts.policy, keyID == AccessKeyID
	if p, ok := s.opts.principals[keyID]; ok {
		policy, known = p, true
	}
	if err == nil && !known {
		err = fmt.Errorf("AWS was not able to validate the provided access credentials")
	}
	if err != nil {
		writeError(w, Error{Status: 401, Code: "AuthFailure", Message: err.Error()}, "")
		return
	}
	req.region, req.policy = region, policy
	if v := r.PostForm.Get("Version"); v != "2016-11-15" {
		writeError(w, Error{Status: 400, Code: "InvalidParameterValue", Message: fmt.Sprintf("Version %q is not 2016-11-15", v)}, "")
		return
	}
	s.Serve(w, r, &faultkit.Call[Action]{Op: req.action}, func(c *faultkit.Call[Action]) faultkit.Answer[Error] {
		req.requestID, req.noCapacity = requestID(c), c.NoCapacity
		answer, apiErr := s.handle(req)
		if apiErr != nil {
			return faultkit.Fail(*apiErr)
		}
		return faultkit.Answer[Error]{Status: http.StatusOK, Body: answer}
	})
}

// requestID is the ID of the call c in EC2's shape.
func requestID(c *faultkit.Call[Action]) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", c.Seq)
}

// write sends a as EC2 does: XML, an error in EC2's envelope.
func write(w http.ResponseWriter, c *faultkit.Call[Action], a faultkit.Answer[Error]) {
	if a.Err != nil {
		writeError(w, *a.Err, requestID(c))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(a.Body)
}

// handle runs one call's action under the lock, with its signer's policy.
func (s *Server) handle(req request) (answer any, apiErr *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caller = req.policy
	if _, ok := DefaultZones[req.region]; !ok {
		return nil, &Error{Status: 401, Code: "AuthFailure", Message: fmt.Sprintf("region %q is not enabled for this account", req.region)}
	}
	switch req.action {
	case RunInstances:
		return s.runInstances(req)
	case DescribeInstances:
		return s.describeInstances(req)
	case TerminateInstances:
		return s.terminateInstances(req)
	case DescribeSpotInstanceRequests:
		return s.describeSpotInstanceRequests(req)
	case DescribeSubnets:
		return s.describeSubnets(req)
	case DescribeVpcs:
		return s.describeVpcs(req)
	case DescribeSecurityGroups:
		return s.describeSecurityGroups(req)
	case CreateSecurityGroup:
		return s.createSecurityGroup(req)
	case AuthorizeSecurityGroupIngress:
		return s.authorizeIngress(req)
	case DeleteSecurityGroup:
		return s.deleteSecurityGroup(req)
	}
	return nil, &Error{Status: 400, Code: "InvalidAction", Message: fmt.Sprintf("The action %s is not valid for this web service.", req.action)}
}

// credentialScope checks a SigV4 Authorization header's credential scope
// (key ID/date/region/ec2/aws4_request) and returns its key ID and region.
// The signature itself is the SDK's business; the fake checks who signed.
func credentialScope(auth string) (keyID, region string, err error) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 Credential=")
	if !ok {
		return "", "", fmt.Errorf("not a SigV4 Authorization header")
	}
	scope, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(scope, "/")
	if len(parts) != 5 || parts[3] != "ec2" || parts[4] != "aws4_request" {
		return "", "", fmt.Errorf("credential scope %q is not key/date/region/ec2/aws4_request", scope)
	}
	return parts[0], parts[2], nil
}

func writeError(w http.ResponseWriter, e Error, requestID string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(errorResponse{Errors: []Error{e}, RequestID: requestID})
}

// list is the values of prefix.1, prefix.2, … (EC2's list encoding).
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

func invalid(format string, args ...any) *Error {
	return &Error{Status: 400, Code: "InvalidParameterValue", Message: fmt.Sprintf(format, args...)}
}

func (s *Server) runInstances(req request) (any, *Error) {
	f := req.form
	in := &instance{
		region: req.region, token: f.Get("ClientToken"), imageID: f.Get("ImageId"),
		instanceType: f.Get("InstanceType"), subnet: f.Get("NetworkInterface.1.SubnetId"),
		securityGroups: list(f, "NetworkInterface.1.SecurityGroupId"),
		spot:           f.Get("InstanceMarketOptions.MarketType") == "spot",
		httpTokens:     f.Get("MetadataOptions.HttpTokens"), tags: map[string]string{},
	}
	if hop, err := strconv.Atoi(f.Get("MetadataOptions.HttpPutResponseHopLimit")); err == nil {
		in.hopLimit = int32(hop)
	}
	for i := 1; f.Has(fmt.Sprintf("TagSpecification.%d.ResourceType", i)); i++ {
		if f.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i)) != "instance" {
			continue
		}
		for j := 1; f.Has(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j)); j++ {
			in.tags[f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j))] = f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Value", i, j))
		}
	}
	if err := s.authorizeRun(in, req.region); err != nil {
		return nil, err
	}
	in.request = canonical(f)
	if id, ok := s.tokens[req.region+"/"+in.token]; ok && in.token != "" {
		old := s.instances[id]
		if old.request != in.request {
			return nil, &Error{Status: 400, Code: "IdempotentParameterMismatch", Message: "Client token " + in.token + " was used with different parameters."}
		}
		return runInstancesResponse{Xmlns: namespace, RequestID: req.requestID, xmlReservation: s.reservation(old)}, nil
	}
	if req.noCapacity {
		return nil, &ErrInsufficientCapacity
	}
	if err := s.validateRun(req, in); err != nil {
		return nil, err
	}
	s.launch(in, f)
	if in.token != "" {
		s.tokens[req.region+"/"+in.token] = in.id
	}
	return runInstancesResponse{Xmlns: namespace, RequestID: req.requestID, xmlReservation: s.reservation(in)}, nil
}

// canonical is a request's parameters without the per-call ones, to tell a
// retry from a different request under the same client token.
func canonical(f url.Values) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		if k != "Action" && k != "Version" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, f.Get(k))
	}
	return b.String()
}

func (s *Server) validateRun(req request, in *instance) *Error {
	f := req.form
	if f.Get("MinCount") != "1" || f.Get("MaxCount") != "1" {
		return invalid("ec2test launches one instance per call (MinCount=MaxCount=1)")
	}
	image := in.imageID
	if param, ok := strings.CutPrefix(image, "resolve:ssm:"); ok {
		if image, ok = DefaultSSMParameters[param]; !ok {
			return invalid("Invalid value '%s' for ImageId: the SSM parameter does not exist or is not an AMI ID", in.imageID)
		}
	}
	if !slices.Contains(DefaultImages, image) {
		return &Error{Status: 400, Code: "InvalidAMIID.NotFound", Message: fmt.Sprintf("The image id '[%s]' does not exist", image)}
	}
	in.imageID = image
	if !slices.Contains(DefaultInstanceTypes, in.instanceType) {
		return invalid("Invalid value '%s' for InstanceType.", in.instanceType)
	}
	if n, err := strconv.Atoi(f.Get("NetworkInterface.1.Ipv6PrefixCount")); f.Has("NetworkInterface.1.Ipv6PrefixCount") && (err != nil || n < 1 || n > 15) {
		return invalid("Invalid value '%s' for Ipv6PrefixCount.", f.Get("NetworkInterface.1.Ipv6PrefixCount"))
	}
	if ud := f.Get("UserData"); ud != "" {
		raw, err := base64.StdEncoding.DecodeString(ud)
		if err != nil || len(raw) > 16*1024 {
			return &Error{Status: 400, Code: "InvalidUserData.Malformed", Message: "User data must be base64 encoded and at most 16 KB."}
		}
		in.userData = string(raw)
	}
	in.zone = DefaultZones[req.region][0]
	if in.subnet != "" {
		zone, ok := DefaultSubnets[in.subnet]
		if !ok || !strings.HasPrefix(zone, req.region) {
			return &Error{Status: 400, Code: "InvalidSubnetID.NotFound", Message: fmt.Sprintf("The subnet ID '%s' does not exist", in.subnet)}
		}
		in.zone = zone
	}
	for _, sg := range in.securityGroups {
		if !s.groupExists(req.region, sg) {
			return &Error{Status: 400, Code: "InvalidGroup.NotFound", Message: fmt.Sprintf("The security group '%s' does not exist", sg)}
		}
	}
	switch {
	case s.unsupp[in.instanceType]:
		return &Error{Status: 400, Code: "Unsupported", Message: fmt.Sprintf("Your requested instance type (%s) is not supported in your requested Availability Zone (%s).", in.instanceType, in.zone)}
	case s.outOfCapacity(in.instanceType) || s.outOfCapacity(in.subnet):
		return &Error{Status: 500, Code: "InsufficientInstanceCapacity", Message: fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", in.instanceType, in.zone)}
	}
	return nil
}

// launch gives in its identity and addresses and records it.
func (s *Server) launch(in *instance, f url.Values) {
	n := len(s.order) + 1
	in.id = fmt.Sprintf("i-%017x", 0xa000000+n)
	in.reservation = fmt.Sprintf("r-%017x", 0xb000000+n)
	in.privateIP = fmt.Sprintf("10.0.%d.%d", n/250, n%250+4)
	if f.Get("NetworkInterface.1.AssociatePublicIpAddress") == "true" {
		in.publicIP = s.opts.publicIP(n)
	}
	// The subnets are dual-stack, each instance's addresses and /80
	// prefixes (prefix delegation) from the documentation range.
	count, _ := strconv.Atoi(f.Get("NetworkInterface.1.Ipv6AddressCount"))
	for i := range count {
		in.ipv6Addresses = append(in.ipv6Addresses, fmt.Sprintf("2001:db8:100::%x:%x", n, i+1))
	}
	count, _ = strconv.Atoi(f.Get("NetworkInterface.1.Ipv6PrefixCount"))
	for i := range count {
		in.ipv6Prefixes = append(in.ipv6Prefixes, fmt.Sprintf("2001:db8:100:0:%x::/80", (n<<4)+i+1))
	}
	in.state, in.stepsLeft, in.launched = "pending", s.opts.steps, time.Now().UTC()
	in.Hide(s.opts.invisibleCalls)
	if in.spot {
		in.spotStatus = "fulfilled"
	}
	s.instances[in.id] = in
	s.order = append(s.order, in.id)
	if in.publicIP != "" {
		// Its delegated prefixes are routed to it, as its metadata service shows them.
		s.Boot(in.id, faultkit.Boot{Name: in.id, UserData: in.userData, PublicIP: in.publicIP, RoutedPrefixes: in.ipv6Prefixes})
	}
}

func (s *Server) reservation(in *instance) xmlReservation {
	return xmlReservation{ReservationID: in.reservation, OwnerID: AccountID, Instances: []xmlInstance{toXML(in)}}
}

func toXML(in *instance) xmlInstance {
	x := xmlInstance{
		InstanceID: in.id, ImageID: in.imageID, State: xmlState{Code: stateCodes[in.state], Name: in.state},
		PrivateIPAddress: in.privateIP, InstanceType: in.instanceType, LaunchTime: in.launched.Format(time.RFC3339),
		Placement: xmlPlacement{AvailabilityZone: in.zone}, SubnetID: in.subnet, ClientToken: in.token,
		MetadataOptions: &xmlMetadataOptions{State: "applied", HTTPTokens: in.httpTokens, HTTPPutResponseHopLimit: in.hopLimit, HTTPEndpoint: "enabled"},
	}
	if in.state == "running" {
		x.IPAddress = in.publicIP
	}
	if in.spot {
		x.InstanceLifecycle, x.SpotInstanceRequestID = "spot", spotRequestID(in.id)
	}
	if in.reason != "" {
		x.StateReason = &xmlStateReason{Code: in.reason, Message: in.reason + ": " + in.state}
	}
	for _, k := range sortedKeys(in.tags) {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: in.tags[k]})
	}
	nic := xmlInterface{NetworkInterfaceID: "eni-" + strings.TrimPrefix(in.id, "i-"), PrivateIPAddress: in.privateIP}
	for _, a := range in.ipv6Addresses {
		nic.Ipv6Addresses = append(nic.Ipv6Addresses, xmlIpv6Address{Ipv6Address: a})
	}
	for _, p := range in.ipv6Prefixes {
		nic.Ipv6Prefixes = append(nic.Ipv6Prefixes, xmlIpv6Prefix{Ipv6Prefix: p})
	}
	x.NetworkInterfaces = []xmlInterface{nic}
	return x
}

// step moves an instance one step on as a describe shows it.
func (s *Server) step(in *instance) {
	if in.state != "pending" && in.state != "shutting-down" && in.state != "stopping" {
		return
	}
	if in.stepsLeft--; in.stepsLeft > 0 {
		return
	}
	in.stepsLeft = s.opts.steps
	in.state = map[string]string{"pending": "running", "shutting-down": "terminated", "stopping": "stopped"}[in.state]
}

func notFound(id string) *Error {
	return &Error{Status: 400, Code: "InvalidInstanceID.NotFound", Message: fmt.Sprintf("The instance ID '%s' does not exist", id)}
}
