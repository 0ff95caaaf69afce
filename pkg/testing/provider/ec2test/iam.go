package ec2test

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Policy is an IAM identity policy the fake authorizes every request by, as
// AWS evaluates one: an explicit Deny wins, then any Allow; nothing else is
// allowed. Statements match by Action and Resource (with * and ? wildcards)
// and by Condition, where a key the request does not carry fails
// StringEquals and StringLike (so a statement conditioned on request tags
// does not cover a RunInstances' subnet or image, as in AWS).
//
// RunInstances is authorized per resource it touches, as AWS does: the
// instance and volume (with aws:RequestTag/*, aws:TagKeys, and for the
// instance ec2:MetadataHttpTokens and ec2:InstanceMarketType), the image,
// subnet, security groups and network interface, ec2:CreateTags of the
// launch (ec2:CreateAction = RunInstances), and ssm:GetParameters of an
// image given as an SSM parameter.
type Policy struct {
	statements []statement
}

type statement struct {
	allow      bool
	actions    []string
	resources  []string
	conditions []condition
}

type condition struct {
	op     string
	key    string
	values []string
}

// operators the fake evaluates; a policy with any other is refused, so a
// test never passes on a condition nobody checked.
var operators = []string{"StringEquals", "StringLike", "ForAllValues:StringEquals", "ForAllValues:StringLike"}

// ParsePolicy reads a policy document.
func ParsePolicy(doc []byte) (*Policy, error) {
	var raw struct {
		Version   string
		Statement []struct {
			Effect    string
			Action    stringOrList
			Resource  stringOrList
			Condition map[string]map[string]stringOrList
		}
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("ec2test: policy: %w", err)
	}
	if raw.Version != "2012-10-17" {
		return nil, fmt.Errorf("ec2test: policy Version %q is not 2012-10-17", raw.Version)
	}
	p := &Policy{}
	for i, st := range raw.Statement {
		if st.Effect != "Allow" && st.Effect != "Deny" || len(st.Action) == 0 || len(st.Resource) == 0 {
			return nil, fmt.Errorf("ec2test: policy statement %d needs Effect Allow or Deny, an Action and a Resource", i)
		}
		s := statement{allow: st.Effect == "Allow", actions: st.Action, resources: st.Resource}
		for op, keys := range st.Condition {
			if !slices.Contains(operators, op) {
				return nil, fmt.Errorf("ec2test: policy statement %d: condition operator %s is not one the fake evaluates (%v)", i, op, operators)
			}
			for key, values := range keys {
				s.conditions = append(s.conditions, condition{op: op, key: key, values: values})
			}
		}
		p.statements = append(p.statements, s)
	}
	return p, nil
}

type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(s))
}

// allowed evaluates one action on one resource with its condition context.
func (p *Policy) allowed(action, resource string, ctx map[string][]string) bool {
	allow := false
	for _, st := range p.statements {
		if !matchesAny(st.actions, action) || !matchesAny(st.resources, resource) || !st.holds(ctx) {
			continue
		}
		if !st.allow {
			return false
		}
		allow = true
	}
	return allow
}

func (st statement) holds(ctx map[string][]string) bool {
	for _, c := range st.conditions {
		got, present := ctx[c.key]
		like := strings.HasSuffix(c.op, "StringLike")
		if strings.HasPrefix(c.op, "ForAllValues:") {
			// Every value the request carries must match one of the policy's.
			for _, v := range got {
				if !valueMatches(like, c.values, v) {
					return false
				}
			}
			continue
		}
		if !present || len(got) != 1 || !valueMatches(like, c.values, got[0]) {
			return false
		}
	}
	return true
}

func valueMatches(like bool, values []string, v string) bool {
	if like {
		return matchesAny(values, v)
	}
	return slices.Contains(values, v)
}

func matchesAny(patterns []string, s string) bool {
	for _, p := range patterns {
		// IAM's * and ? match across "/", path.Match's do not.
		if ok, _ := path.Match(strings.ReplaceAll(p, "/", "\x00"), strings.ReplaceAll(s, "/", "\x00")); ok {
			return true
		}
	}
	return false
}

// authorize checks one action on every resource of the fake's account and
// region, "*" standing for actions without resource-level permissions.
func (s *Server) authorize(action string, ctx map[string][]string, resources ...string) *Error {
	p := s.caller
	if p == nil {
		return nil
	}
	if len(resources) == 0 {
		resources = []string{"*"}
	}
	for _, r := range resources {
		if !p.allowed(action, r, ctx) {
			return &Error{Status: 403, Code: "UnauthorizedOperation", Message: fmt.Sprintf(
				"You are not authorized to perform this operation. User: arn:aws:iam::%s:user/proxy-operator is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
				AccountID, action, r, action)}
		}
	}
	return nil
}

// authorizeRun is RunInstances' authorization, per resource.
func (s *Server) authorizeRun(in *instance, region string) *Error {
	arn := func(kind, id string) string {
		return fmt.Sprintf("arn:aws:ec2:%s:%s:%s/%s", region, AccountID, kind, id)
	}
	requestTags := map[string][]string{"aws:TagKeys": sortedKeys(in.tags)}
	for k, v := range in.tags {
		requestTags["aws:RequestTag/"+k] = []string{v}
	}
	market := "on-demand"
	if in.spot {
		market = "spot"
	}
	instanceCtx := map[string][]string{"ec2:MetadataHttpTokens": {in.httpTokens}, "ec2:InstanceMarketType": {market}}
	for k, v := range requestTags {
		instanceCtx[k] = v
	}
	image := in.imageID
	if param, ok := strings.CutPrefix(image, "resolve:ssm:"); ok {
		if err := s.authorize("ssm:GetParameters", nil, fmt.Sprintf("arn:aws:ssm:%s::parameter%s", region, param)); err != nil {
			return err
		}
		image = DefaultSSMParameters[param]
	}
	checks := []struct {
		resource string
		ctx      map[string][]string
	}{
		{arn("instance", "*"), instanceCtx},
		{arn("volume", "*"), requestTags},
		{arn("network-interface", "*"), nil},
		{fmt.Sprintf("arn:aws:ec2:%s::image/%s", region, image), nil},
	}
	if in.subnet != "" {
		checks = append(checks, struct {
			resource string
			ctx      map[string][]string
		}{arn("subnet", in.subnet), nil})
	}
	for _, sg := range in.securityGroups {
		checks = append(checks, struct {
			resource string
			ctx      map[string][]string
		}{arn("security-group", sg), nil})
	}
	for _, c := range checks {
		if err := s.authorize("ec2:RunInstances", c.ctx, c.resource); err != nil {
			return err
		}
	}
	if len(in.tags) > 0 {
		tagCtx := map[string][]string{"ec2:CreateAction": {"RunInstances"}}
		for k, v := range requestTags {
			tagCtx[k] = v
		}
		return s.authorize("ec2:CreateTags", tagCtx, arn("instance", "*"), arn("volume", "*"))
	}
	return nil
}

// authorizeCreateGroup is CreateSecurityGroup's authorization: the group
// with its request tags, in its VPC, and the tags it is created with.
func (s *Server) authorizeCreateGroup(g *group) *Error {
	requestTags := map[string][]string{"aws:TagKeys": sortedKeys(g.tags)}
	for k, v := range g.tags {
		requestTags["aws:RequestTag/"+k] = []string{v}
	}
	arn := func(kind, id string) string {
		return fmt.Sprintf("arn:aws:ec2:%s:%s:%s/%s", g.region, AccountID, kind, id)
	}
	if err := s.authorize("ec2:CreateSecurityGroup", requestTags, arn("security-group", "*")); err != nil {
		return err
	}
	if err := s.authorize("ec2:CreateSecurityGroup", nil, arn("vpc", g.vpc)); err != nil {
		return err
	}
	if len(g.tags) == 0 {
		return nil
	}
	requestTags["ec2:CreateAction"] = []string{"CreateSecurityGroup"}
	return s.authorize("ec2:CreateTags", requestTags, arn("security-group", "*"))
}
