package cloudkit

import (
	"regexp"
	"strings"
)

// Clouds whose tags are plain strings, not key=value labels
// (DigitalOcean), carry the labels as tags "pxo:<name>:<value>", where name
// is the label key without its "crawl.proxyfleet.io/" prefix. The "pxo:"
// prefix keeps them apart from a user's own tags.
const (
	FlatTagPrefix = "pxo:"
	labelPrefix   = "crawl.proxyfleet.io/"
)

// validFlatTag is DigitalOcean's tag syntax (letters, digits, colons,
// dashes, underscores; at most 255), which other clouds' free-form tags
// also accept.
var validFlatTag = regexp.MustCompile(`^[a-zA-Z0-9_:-]{1,255}$`)

// FlatTag is the flat tag of label key=value, and false when it would be
// no valid tag (a Proxy name with a dot): such a label is left out, as
// Labels leaves out what is no label value; pkg/gc needs only the
// managed-by and UID tags, which always fit.
func FlatTag(key, value string) (string, bool) {
	tag := FlatTagPrefix + strings.TrimPrefix(key, labelPrefix) + ":" + value
	return tag, strings.HasPrefix(key, labelPrefix) && validFlatTag.MatchString(tag)
}

// FlatTags are labels as flat tags, each valid one.
func FlatTags(labels map[string]string) []string {
	var tags []string
	for k, v := range labels {
		if tag, ok := FlatTag(k, v); ok {
			tags = append(tags, tag)
		}
	}
	return tags
}

// LabelsOfFlatTags reads back the labels FlatTags wrote; other tags are
// ignored.
func LabelsOfFlatTags(tags []string) map[string]string {
	labels := map[string]string{}
	for _, tag := range tags {
		rest, ok := strings.CutPrefix(tag, FlatTagPrefix)
		if !ok {
			continue
		}
		if name, value, ok := strings.Cut(rest, ":"); ok && name != "" {
			labels[labelPrefix+name] = value
		}
	}
	return labels
}
