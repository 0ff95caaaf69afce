// Package geoip maps an exit IP to its country with a GeoIP database file
// in MaxMind DB format (GeoLite2-Country, GeoIP2-Country or City, DB-IP's
// country lite, or any database whose records carry country.iso_code) that
// the user mounts and names with the operator's --geoip-database flag
// (docs/geography.md). The file is opened once and memory-mapped: a lookup
// is a walk of its search tree, with no I/O of its own.
package geoip

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/oschwald/maxminddb-golang/v2"
)

// DB is an open GeoIP database. It is safe for concurrent use.
type DB struct {
	reader *maxminddb.Reader
}

// Open opens the database at path and checks that it can be read: an
// unreadable or corrupt file fails here, at the operator's start, rather
// than at each probe.
func Open(path string) (*DB, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, err
	}
	if r.Metadata.NodeCount == 0 {
		_ = r.Close()
		return nil, fmt.Errorf("%s: the database has no networks", path)
	}
	return &DB{reader: r}, nil
}

// record is the part of a country (or city) database's record we read:
// the country the network is in, and the one it is registered to, which
// answers for networks without a located country (anycast, satellite).
type record struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	RegisteredCountry struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"registered_country"`
}

// Country is ip's ISO 3166-1 alpha-2 code in upper case, "" when ip is
// not an address, the database has no network for it, or the record names
// no country.
func (db *DB) Country(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	var rec record
	if err := db.reader.Lookup(addr.Unmap()).Decode(&rec); err != nil {
		return ""
	}
	code := rec.Country.ISOCode
	if code == "" {
		code = rec.RegisteredCountry.ISOCode
	}
	if len(code) != 2 {
		return ""
	}
	return strings.ToUpper(code)
}

// DatabaseType is the type the file's metadata names (GeoLite2-Country,
// say), for the start-up log.
func (db *DB) DatabaseType() string { return db.reader.Metadata.DatabaseType }

// Close unmaps the file.
func (db *DB) Close() error { return db.reader.Close() }
