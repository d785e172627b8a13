// Package heraldinbox holds the inbox component, herald-inbox.js: the
// ES module that defines <herald-inbox> and <herald-bell>. This folder is
// also the component's npm package (package.json, herald-inbox.d.ts,
// README.md), so the file `herald serve` serves and the file the package
// ships are one file.
package heraldinbox

import (
	"crypto/sha256"
	"crypto/sha512"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
)

// Source is herald-inbox.js, byte for byte.
//
//go:embed herald-inbox.js
var Source []byte

// FileName is the versioned, content-hashed name the module is served
// under: herald-inbox.<first 16 hex digits of its SHA-256>.js. A new
// build with other bytes has another name, so the file can be cached
// forever.
func FileName() string {
	sum := sha256.Sum256(Source)
	return "herald-inbox." + hex.EncodeToString(sum[:8]) + ".js"
}

// Integrity is the module's Subresource Integrity value, sha384-<base64>,
// for the integrity attribute of the script element that loads it.
func Integrity() string {
	sum := sha512.Sum384(Source)
	return "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
}
