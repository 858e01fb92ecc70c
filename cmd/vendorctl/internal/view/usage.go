package view

import (
	"strconv"
	"strings"
	"time"

	"vendorgate/gateway/usage"
)

// UsageRow is one (vendor, limit) of `usage top`: the gateway's row and
// the company name vendorctl joined from the backend.
type UsageRow struct {
	usage.TopRow
	CompanyName string `json:"company_name"`
}

// UsageTop is `usage top`'s answer.
type UsageTop struct {
	Window  string     `json:"window"`
	Vendors []UsageRow `json:"vendors"`
}

// VendorUsage is `usage show`'s answer: the gateway's per-vendor form and
// the company name.
type VendorUsage struct {
	usage.VendorUsage
	CompanyName string `json:"company_name"`
}

// UsageBucket is one minute's (or hour's) counts.
type UsageBucket = usage.Bucket

// WriteUsageTop writes the top list, most refused first.
func WriteUsageTop(t *Table, u UsageTop) {
	t.Row("VENDOR", "COMPANY", "LIMIT", "QUOTA", "ALLOWED", "LIMITED", "SHADOW", "PEAK/MIN")
	for _, r := range u.Vendors {
		t.Row(r.VendorID, r.CompanyName, r.Limit, quota(r.Quota, r.PeriodSeconds),
			strconv.FormatUint(r.Allowed, 10), strconv.FormatUint(r.Limited, 10),
			strconv.FormatUint(r.ShadowLimited, 10), strconv.FormatUint(r.PeakPerMinute, 10))
	}
	if len(u.Vendors) == 0 {
		t.Note("no requests counted in the last " + u.Window)
		return
	}
	t.Note("")
	t.Note("PEAK/MIN is the busiest minute's demand: its requests allowed and refused alike.")
}

// quota reads "120/1m", "10/30s", "1000/1h".
func quota(q int, period int64) string {
	if q == 0 || period == 0 {
		return "-"
	}
	p := strconv.FormatInt(period, 10) + "s"
	switch {
	case period%3600 == 0:
		p = strconv.FormatInt(period/3600, 10) + "h"
	case period%60 == 0:
		p = strconv.FormatInt(period/60, 10) + "m"
	}
	return strconv.Itoa(q) + "/" + p
}

// WriteVendorUsage writes each limit's totals and a sparkline of the last
// minutes' demand against the quota: one character a minute, higher is
// more of the quota used; a minute with refusals is marked below it.
func WriteVendorUsage(t *Table, u VendorUsage) {
	t.Row("vendor_id", u.VendorID)
	t.Row("company_name", u.CompanyName)
	t.Row("window", u.Window)
	for _, p := range u.Policies {
		var a, l, s uint64
		for _, b := range p.Minutes {
			a, l, s = a+b.Allowed, l+b.Limited, s+b.ShadowLimited
		}
		t.Line("")
		t.Row(p.Limit, "quota "+quota(p.Quota, p.PeriodSeconds))
		if q := p.QuotaUsed; q != nil {
			t.Line("", "used "+strconv.Itoa(q.Used)+" of "+strconv.Itoa(q.Quota)+" this window ("+
				q.WindowStart.UTC().Format("2006-01-02 15:04")+" to "+q.WindowEnd.UTC().Format("2006-01-02 15:04")+" UTC)")
		}
		t.Line("", "allowed "+strconv.FormatUint(a, 10)+", limited "+strconv.FormatUint(l, 10)+", shadow-limited "+strconv.FormatUint(s, 10))
		spark, marks := Sparkline(p.Minutes, p.Quota, p.PeriodSeconds)
		if spark != "" {
			t.Line("", "per minute  |"+spark+"|")
			if strings.TrimSpace(marks) != "" {
				t.Line("", "refused     |"+marks+"|  x: refused, s: a shadow limit would refuse")
			}
			span, scale := SparkLegend(p.Minutes, p.Quota, p.PeriodSeconds)
			t.Line("", "minutes     "+span)
			t.Line("", "scale       "+scale)
		}
	}
}

// SparkLegend says what a Sparkline of bs shows: the minutes it spans
// (UTC, one character each) and its scale (what a full and a low
// character stand for).
func SparkLegend(bs []UsageBucket, quota int, periodSeconds int64) (span, scale string) {
	var first, last time.Time
	n := 0
	for _, b := range bs {
		if b.Seconds != 60 {
			continue
		}
		if n == 0 {
			first = b.At
		}
		last = b.At.Add(time.Minute)
		n++
	}
	layout := "15:04"
	if first.UTC().YearDay() != last.UTC().YearDay() || first.UTC().Year() != last.UTC().Year() {
		layout = "2006-01-02 15:04"
	}
	minutes := strconv.Itoa(n) + " minutes"
	if n == 1 {
		minutes = "1 minute"
	}
	span = first.UTC().Format(layout) + " to " + last.UTC().Format(layout) + " UTC, " + minutes + ", one character each"
	if quota <= 0 || periodSeconds <= 0 {
		return span, "no quota: " + string(sparks[len(sparks)-1]) + " any request, blank none"
	}
	perMinute := strconv.FormatFloat(float64(quota)*60/float64(periodSeconds), 'f', -1, 64)
	return span, string(sparks[len(sparks)-1]) + " " + perMinute + " requests a minute (the quota's rate) or more, " +
		string(sparks[1]) + " a few, blank none; requests allowed and refused alike"
}

// sparks are the levels of a sparkline, empty to full.
var sparks = []rune(" ▁▂▃▄▅▆▇█")

// Sparkline draws the minute buckets' demand (allowed + limited) against
// the quota's rate per minute: full at or over it. marks has an "x" under
// each minute with refusals (and "s" where only a shadow limit would have
// refused). Hour buckets are left out: a line is minutes.
func Sparkline(bs []UsageBucket, quota int, periodSeconds int64) (spark, marks string) {
	perMinute := 0.0
	if quota > 0 && periodSeconds > 0 {
		perMinute = float64(quota) * 60 / float64(periodSeconds)
	}
	var sb, mb strings.Builder
	for _, b := range bs {
		if b.Seconds != 60 {
			continue
		}
		demand := float64(b.Allowed + b.Limited)
		level := 0
		switch {
		case demand == 0:
		case perMinute == 0:
			level = len(sparks) - 1
		default:
			level = 1 + int(demand/perMinute*float64(len(sparks)-2)+0.5)
			level = min(level, len(sparks)-1)
		}
		sb.WriteRune(sparks[level])
		switch {
		case b.Limited > 0:
			mb.WriteByte('x')
		case b.ShadowLimited > 0:
			mb.WriteByte('s')
		default:
			mb.WriteByte(' ')
		}
	}
	return sb.String(), mb.String()
}
