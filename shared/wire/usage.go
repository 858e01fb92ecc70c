package wire

// UsageFlushPath is the backend's internal route a gateway posts its usage
// flushes to (behind the internal token): the daily totals that
// `vendorctl usage month` reads.
const UsageFlushPath = "/internal/v1/usage"

// UsageFlush is one gateway flush, or one part of a large one: the counts
// of one Unix minute per vendor and limit policy. ID names it: the backend
// adds a flush with an ID it has seen to nothing, so a retry counts once.
type UsageFlush struct {
	ID     string          `json:"id"`
	Minute int64           `json:"minute"`
	Rows   []UsageFlushRow `json:"rows"`
}

// UsageFlushRow is one vendor's counts under one policy.
type UsageFlushRow struct {
	VendorID      string `json:"vendor_id"`
	Policy        string `json:"policy"`
	Allowed       uint64 `json:"allowed"`
	Limited       uint64 `json:"limited"`
	ShadowLimited uint64 `json:"shadow_limited"`
}

// MaxUsageFlushRows bounds the rows of one flush request; a gateway sends
// a larger flush as several parts, each with an ID of its own.
const MaxUsageFlushRows = 500
