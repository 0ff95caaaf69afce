package ec2test

import "encoding/xml"

// The answers, in the XML shape the EC2 API reference documents for API
// version 2016-11-15 (the one aws-sdk-go-v2 speaks).
const namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlMetadataOptions struct {
	State                   string `xml:"state"`
	HTTPTokens              string `xml:"httpTokens"`
	HTTPPutResponseHopLimit int32  `xml:"httpPutResponseHopLimit"`
	HTTPEndpoint            string `xml:"httpEndpoint"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
}

type xmlInstance struct {
	InstanceID            string              `xml:"instanceId"`
	ImageID               string              `xml:"imageId"`
	State                 xmlState            `xml:"instanceState"`
	PrivateIPAddress      string              `xml:"privateIpAddress,omitempty"`
	IPAddress             string              `xml:"ipAddress,omitempty"`
	InstanceType          string              `xml:"instanceType"`
	LaunchTime            string              `xml:"launchTime"`
	Placement             xmlPlacement        `xml:"placement"`
	SubnetID              string              `xml:"subnetId,omitempty"`
	VpcID                 string              `xml:"vpcId,omitempty"`
	ClientToken           string              `xml:"clientToken,omitempty"`
	InstanceLifecycle     string              `xml:"instanceLifecycle,omitempty"`
	SpotInstanceRequestID string              `xml:"spotInstanceRequestId,omitempty"`
	StateReason           *xmlStateReason     `xml:"stateReason,omitempty"`
	MetadataOptions       *xmlMetadataOptions `xml:"metadataOptions,omitempty"`
	Tags                  []xmlTag            `xml:"tagSet>item"`
	NetworkInterfaces     []xmlInterface      `xml:"networkInterfaceSet>item"`
}

// xmlInterface is an instance's network interface, with its IPv6
// addresses and delegated prefixes.
type xmlInterface struct {
	NetworkInterfaceID string           `xml:"networkInterfaceId"`
	PrivateIPAddress   string           `xml:"privateIpAddress"`
	Ipv6Addresses      []xmlIpv6Address `xml:"ipv6AddressesSet>item"`
	Ipv6Prefixes       []xmlIpv6Prefix  `xml:"ipv6PrefixSet>item"`
	Attachment         struct {
		DeviceIndex int `xml:"deviceIndex"`
	} `xml:"attachment"`
}

type xmlIpv6Address struct {
	Ipv6Address string `xml:"ipv6Address"`
}

type xmlIpv6Prefix struct {
	Ipv6Prefix string `xml:"ipv6Prefix"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"TerminateInstancesResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

// errorResponse is EC2's error body (not the namespace'd one of other
// Query APIs).
type errorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Errors    []Error  `xml:"Errors>Error"`
	RequestID string   `xml:"RequestID"`
}

type xmlSpotStatus struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlSpotRequest struct {
	ID         string        `xml:"spotInstanceRequestId"`
	InstanceID string        `xml:"instanceId"`
	State      string        `xml:"state"`
	Type       string        `xml:"type"`
	Status     xmlSpotStatus `xml:"status"`
}

type describeSpotInstanceRequestsResponse struct {
	XMLName   xml.Name         `xml:"DescribeSpotInstanceRequestsResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Requests  []xmlSpotRequest `xml:"spotInstanceRequestSet>item"`
}

type xmlSubnet struct {
	ID    string `xml:"subnetId"`
	VpcID string `xml:"vpcId"`
	Zone  string `xml:"availabilityZone"`
	State string `xml:"state"`
}

type describeSubnetsResponse struct {
	XMLName   xml.Name    `xml:"DescribeSubnetsResponse"`
	Xmlns     string      `xml:"xmlns,attr"`
	RequestID string      `xml:"requestId"`
	Subnets   []xmlSubnet `xml:"subnetSet>item"`
}

type xmlVpc struct {
	ID        string `xml:"vpcId"`
	IsDefault bool   `xml:"isDefault"`
	State     string `xml:"state"`
}

type describeVpcsResponse struct {
	XMLName   xml.Name `xml:"DescribeVpcsResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Vpcs      []xmlVpc `xml:"vpcSet>item"`
}

type createSecurityGroupResponse struct {
	XMLName   xml.Name `xml:"CreateSecurityGroupResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
	GroupID   string   `xml:"groupId"`
}

// returnResponse is the answer of the actions that say only "true".
type returnResponse struct {
	XMLName   xml.Name
	Xmlns     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
	Return    bool   `xml:"return"`
}

type xmlGroup struct {
	OwnerID     string   `xml:"ownerId"`
	ID          string   `xml:"groupId"`
	Name        string   `xml:"groupName"`
	Description string   `xml:"groupDescription"`
	VpcID       string   `xml:"vpcId"`
	Tags        []xmlTag `xml:"tagSet>item"`
}

type describeSecurityGroupsResponse struct {
	XMLName   xml.Name   `xml:"DescribeSecurityGroupsResponse"`
	Xmlns     string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	Groups    []xmlGroup `xml:"securityGroupInfo>item"`
}
