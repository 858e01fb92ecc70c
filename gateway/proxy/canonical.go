package proxy

import (
	"unsafe"

	"vendorgate/shared/wire"
)

// The request headers the gateway sets, spelled as fasthttp normalizes
// header names (TestCanonicalNames checks each against that
// normalization): SetCanonical takes them as they are, where Set would
// copy and normalize the name on every request.
var (
	canonInternalToken = []byte(wire.HeaderInternalToken)
	canonVendorID      = []byte(wire.HeaderVendorID)
	canonKeyID         = []byte(wire.HeaderKeyID)
	canonEnvironment   = []byte(wire.HeaderEnvironment)
	canonRequestID     = []byte(wire.HeaderRequestID)
	canonForwardedFor  = []byte(wire.HeaderForwardedFor)
)

// bytesOf is s's bytes without a copy, for a fasthttp setter that copies
// the value it is given and keeps no reference to it.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
