package cloudkit

import "regexp"

// validTagValue is a cluster ID that DigitalOcean takes as a tag (and Azure
// as a tag value) as it is.
var validTagValue = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// IsTagValue reports whether s is 1-63 letters, digits, dashes or
// underscores: a cluster ID that becomes a tag unchanged.
func IsTagValue(s string) bool { return validTagValue.MatchString(s) }
