package ec2test

import (
	"encoding/xml"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// The fake's network: one VPC per region, the default one, holding the
// region's DefaultSubnets and DefaultSecurityGroups.
func vpcOf(region string) string {
	return fmt.Sprintf("vpc-%017x", fnvString(region))
}

func fnvString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h >> 4 // 60 bits, as %017x shows them: a VPC ID's 17 hex digits
}

// group is a security group the provider created.
type group struct {
	id, name, region, vpc, description string
	tags                               map[string]string
	ingress                            []string // "tcp/3128/10.0.0.0/16"
}

// SecurityGroup is a test's view of a created group.
type SecurityGroup struct {
	ID, Name, VPC string
	Tags          map[string]string
	// Ingress are its rules as "protocol/port/CIDR".
	Ingress []string
}

// SecurityGroups are the groups the provider created and has not deleted.
func (s *Server) SecurityGroups() []SecurityGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SecurityGroup
	for _, g := range s.groups {
		tags := map[string]string{}
		for k, v := range g.tags {
			tags[k] = v
		}
		out = append(out, SecurityGroup{ID: g.id, Name: g.name, VPC: g.vpc, Tags: tags, Ingress: slices.Clone(g.ingress)})
	}
	slices.SortFunc(out, func(a, b SecurityGroup) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// SetGroupTag sets a tag of a created security group behind the
// provider's back.
func (s *Server) SetGroupTag(id, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[id]
	if !ok {
		return fmt.Errorf("ec2test: no security group %s", id)
	}
	g.tags[key] = value
	return nil
}

// groupExists: id is a default group or a created one of the region.
func (s *Server) groupExists(region, id string) bool {
	g, ok := s.groups[id]
	return slices.Contains(DefaultSecurityGroups, id) || ok && g.region == region
}

func (s *Server) describeSubnets(req request) (any, *Error) {
	if err := s.authorize("ec2:DescribeSubnets", nil); err != nil {
		return nil, err
	}
	resp := describeSubnetsResponse{Xmlns: namespace, RequestID: req.requestID}
	for _, id := range list(req.form, "SubnetId") {
		zone, ok := DefaultSubnets[id]
		if !ok || !strings.HasPrefix(zone, req.region) {
			return nil, &Error{Status: 400, Code: "InvalidSubnetID.NotFound", Message: fmt.Sprintf("The subnet ID '%s' does not exist", id)}
		}
		resp.Subnets = append(resp.Subnets, xmlSubnet{ID: id, VpcID: vpcOf(req.region), Zone: zone, State: "available"})
	}
	return resp, nil
}

func (s *Server) describeVpcs(req request) (any, *Error) {
	if err := s.authorize("ec2:DescribeVpcs", nil); err != nil {
		return nil, err
	}
	if name := req.form.Get("Filter.1.Name"); name != "" && (name != "is-default" || req.form.Get("Filter.1.Value.1") != "true") {
		return nil, invalid("ec2test knows only the filter is-default=true")
	}
	return describeVpcsResponse{Xmlns: namespace, RequestID: req.requestID, Vpcs: []xmlVpc{{ID: vpcOf(req.region), IsDefault: true, State: "available"}}}, nil
}

func (s *Server) createSecurityGroup(req request) (any, *Error) {
	f := req.form
	g := &group{name: f.Get("GroupName"), description: f.Get("GroupDescription"), region: req.region, vpc: f.Get("VpcId"), tags: map[string]string{}}
	switch {
	case g.name == "" || g.description == "":
		return nil, &Error{Status: 400, Code: "MissingParameter", Message: "The request must contain the parameters GroupName and GroupDescription"}
	case g.vpc != vpcOf(req.region):
		return nil, &Error{Status: 400, Code: "InvalidVpcID.NotFound", Message: fmt.Sprintf("The vpc ID '%s' does not exist", g.vpc)}
	}
	for i := 1; f.Has(fmt.Sprintf("TagSpecification.%d.ResourceType", i)); i++ {
		if rt := f.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i)); rt != "security-group" {
			return nil, invalid("tags of resource type %s on CreateSecurityGroup", rt)
		}
		for j := 1; f.Has(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j)); j++ {
			g.tags[f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j))] = f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Value", i, j))
		}
	}
	for _, other := range s.groups {
		if other.vpc == g.vpc && other.name == g.name {
			return nil, &Error{Status: 400, Code: "InvalidGroup.Duplicate", Message: fmt.Sprintf("The security group '%s' already exists for VPC '%s'", g.name, g.vpc)}
		}
	}
	if err := s.authorizeCreateGroup(g); err != nil {
		return nil, err
	}
	s.nextID++
	g.id = fmt.Sprintf("sg-%017x", 0xb000000+s.nextID)
	s.groups[g.id] = g
	return createSecurityGroupResponse{Xmlns: namespace, RequestID: req.requestID, Return: true, GroupID: g.id}, nil
}

func (s *Server) authorizeIngress(req request) (any, *Error) {
	g, err := s.ownGroup(req, "ec2:AuthorizeSecurityGroupIngress")
	if err != nil {
		return nil, err
	}
	var rules []string
	for i := 1; req.form.Has(fmt.Sprintf("IpPermissions.%d.IpProtocol", i)); i++ {
		p := fmt.Sprintf("IpPermissions.%d.", i)
		proto, from, to := req.form.Get(p+"IpProtocol"), req.form.Get(p+"FromPort"), req.form.Get(p+"ToPort")
		if from != to {
			return nil, invalid("ec2test takes one port per permission, not %s-%s", from, to)
		}
		for _, cidr := range append(listf(req.form, p+"IpRanges.%d.CidrIp"), listf(req.form, p+"Ipv6Ranges.%d.CidrIpv6")...) {
			rules = append(rules, proto+"/"+from+"/"+cidr)
		}
	}
	for _, r := range rules {
		if slices.Contains(g.ingress, r) {
			return nil, &Error{Status: 400, Code: "InvalidPermission.Duplicate", Message: fmt.Sprintf("the specified rule %q already exists", r)}
		}
	}
	g.ingress = append(g.ingress, rules...)
	return returnResponse{XMLName: xml.Name{Local: "AuthorizeSecurityGroupIngressResponse"}, Xmlns: namespace, RequestID: req.requestID, Return: true}, nil
}

func (s *Server) deleteSecurityGroup(req request) (any, *Error) {
	g, err := s.ownGroup(req, "ec2:DeleteSecurityGroup")
	if err != nil {
		return nil, err
	}
	for _, in := range s.instances {
		if in.state != "terminated" && slices.Contains(in.securityGroups, g.id) {
			return nil, &Error{Status: 400, Code: "DependencyViolation", Message: fmt.Sprintf("resource %s has a dependent object", g.id)}
		}
	}
	delete(s.groups, g.id)
	return returnResponse{XMLName: xml.Name{Local: "DeleteSecurityGroupResponse"}, Xmlns: namespace, RequestID: req.requestID, Return: true}, nil
}

// ownGroup finds the GroupId of req and authorizes action on it.
func (s *Server) ownGroup(req request, action string) (*group, *Error) {
	id := req.form.Get("GroupId")
	g, ok := s.groups[id]
	if !ok || g.region != req.region {
		return nil, &Error{Status: 400, Code: "InvalidGroup.NotFound", Message: fmt.Sprintf("The security group '%s' does not exist", id)}
	}
	arn := fmt.Sprintf("arn:aws:ec2:%s:%s:security-group/%s", g.region, AccountID, g.id)
	return g, s.authorize(action, resourceTags(g.tags), arn)
}

func (s *Server) describeSecurityGroups(req request) (any, *Error) {
	if err := s.authorize("ec2:DescribeSecurityGroups", nil); err != nil {
		return nil, err
	}
	match, err := groupFilters(req)
	if err != nil {
		return nil, err
	}
	resp := describeSecurityGroupsResponse{Xmlns: namespace, RequestID: req.requestID}
	ids := list(req.form, "GroupId")
	for _, g := range s.groups {
		if g.region != req.region || !match(g) || len(ids) > 0 && !slices.Contains(ids, g.id) {
			continue
		}
		x := xmlGroup{OwnerID: AccountID, ID: g.id, Name: g.name, Description: g.description, VpcID: g.vpc}
		for _, k := range sortedKeys(g.tags) {
			x.Tags = append(x.Tags, xmlTag{Key: k, Value: g.tags[k]})
		}
		resp.Groups = append(resp.Groups, x)
	}
	slices.SortFunc(resp.Groups, func(a, b xmlGroup) int { return strings.Compare(a.ID, b.ID) })
	return resp, nil
}

// groupFilters are DescribeSecurityGroups' filters the provider uses.
func groupFilters(req request) (func(*group) bool, *Error) {
	fs, err := parseFilters(req, "group-name", "vpc-id")
	if err != nil {
		return nil, err
	}
	return func(g *group) bool {
		return fs.match(g.tags, func(name string) []string {
			return []string{map[string]string{"group-name": g.name, "vpc-id": g.vpc}[name]}
		})
	}, nil
}

// listf is the values of format with 1, 2, … for its %d, while they exist.
func listf(form url.Values, format string) []string {
	var out []string
	for i := 1; form.Has(fmt.Sprintf(format, i)); i++ {
		out = append(out, form.Get(fmt.Sprintf(format, i)))
	}
	return out
}
