package gce

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// GCE labels allow only lowercase letters, digits, '_' and '-' in keys and
// values, at most 63 characters each, and a key must start with a letter.
// The operator's tags (provider.Tags) are Kubernetes-style, so they are mapped:
//
//	key:   '.' → '-', '/' → '_'   crawl.proxyfleet.io/managed-by → crawl-proxyfleet-io_managed-by
//	value: '.' → '_'              my.proxy → my_proxy
//
// anything else outside the alphabet becomes '-', upper case becomes lower
// case, and a key or value longer than 63 characters keeps its first 52
// characters, then '-' and 10 hex digits of the SHA-256 of the original, so
// it stays readable and distinct. The key mapping is undone by tagKey for
// keys of the form "<dns-prefix>_<name>" whose prefix has no '-' (all of ours);
// values undo by '_' → '.' (Kubernetes names never contain '_'). Truncated
// values cannot be undone: the exact tags also travel in the instance's
// metadata (metadataTags), and labels serve only for filtering.
const (
	maxLabelLength = 63
	labelHashHex   = 10
)

// labelKey maps a tag key to a GCE label key.
func labelKey(tag string) string {
	key := mapLabelChars(tag, func(r rune) rune {
		switch r {
		case '.':
			return '-'
		case '/':
			return '_'
		}
		return -1
	})
	if key == "" || key[0] < 'a' || key[0] > 'z' {
		key = "k" + key
	}
	return shorten(key, tag)
}

// labelValue maps a tag value to a GCE label value.
func labelValue(tag string) string {
	value := mapLabelChars(tag, func(r rune) rune {
		if r == '.' {
			return '_'
		}
		return -1
	})
	return shorten(value, tag)
}

// tagKey undoes labelKey for keys of the form "<dns-prefix>_<name>".
func tagKey(label string) string {
	prefix, name, ok := strings.Cut(label, "_")
	if !ok {
		return label
	}
	return strings.ReplaceAll(prefix, "-", ".") + "/" + name
}

// tagValue undoes labelValue (except truncation).
func tagValue(label string) string { return strings.ReplaceAll(label, "_", ".") }

// labelsFromTags maps every tag to a label.
func labelsFromTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		out[labelKey(k)] = labelValue(v)
	}
	return out
}

// tagsFromLabels undoes labelsFromTags as far as it can.
func tagsFromLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[tagKey(k)] = tagValue(v)
	}
	return out
}

// mapLabelChars lowercases s and maps each rune through special (a
// negative result means "not special"); other runes outside [a-z0-9_-]
// become '-'.
func mapLabelChars(s string, special func(rune) rune) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToLower(s) {
		if m := special(r); m >= 0 {
			b.WriteRune(m)
			continue
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

// shorten keeps mapped within maxLabelLength, hashing the original so that
// two long values sharing a prefix stay distinct.
func shorten(mapped, original string) string {
	if len(mapped) <= maxLabelLength {
		return mapped
	}
	sum := sha256.Sum256([]byte(original))
	keep := maxLabelLength - 1 - labelHashHex
	return mapped[:keep] + "-" + hex.EncodeToString(sum[:])[:labelHashHex]
}
