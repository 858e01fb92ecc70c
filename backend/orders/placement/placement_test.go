package placement

import (
	"strings"
	"testing"
	"time"
)

func TestNormaliseMC(t *testing.T) {
	cases := map[string]string{
		"MC-123456": "MC123456", "mc-012345": "MC12345", "MC 12345": "MC12345", "12345": "MC12345",
		"  mc0000001 ": "MC1", "MC12345678": "MC12345678", "000012345678": "MC12345678",
		"MC123456789": "", "MC": "", "MC-000": "", "": "", "MX123": "", "12a45": "", "MC-12_3": "",
	}
	for in, want := range cases {
		got, ok := NormaliseMC(in)
		if ok != (want != "") || got != want {
			t.Errorf("NormaliseMC(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestParseNormalises(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	body := `{"mc_number":"mc 0042","driver":{"first_name":" Ann ","last_name":"Lee","date_of_birth":"1980-02-03","license_number":"d12","license_state":"tx"},"services":["psp","mvr"]}`
	r, err := Parse("k", []byte(body), now)
	if err != nil {
		t.Fatal(err)
	}
	if r.MCNumber != "MC42" || r.Driver.FirstName != "Ann" || r.Driver.LicenseNumber != "D12" || r.Driver.LicenseState != "TX" ||
		strings.Join(r.Services, ",") != "mvr,psp" || r.ExternalReference != nil {
		t.Fatalf("parsed = %+v", r)
	}
	// Age limits are measured from now: 16 today is allowed, a day short is not.
	for dob, ok := range map[string]bool{"2010-06-01": true, "2010-06-02": false, "1906-06-02": true, "1905-01-01": false} {
		b := strings.Replace(body, "1980-02-03", dob, 1)
		_, err := Parse("k", []byte(b), now)
		if (err == nil) != ok {
			t.Errorf("date_of_birth %s: %v", dob, err)
		}
	}
	// Birthdays count by month and day, not day of the year: on 2020-02-29
	// (day 60 of a leap year) a driver born 1899-03-01 (day 60) is 120.
	b := strings.Replace(body, "1980-02-03", "1899-03-01", 1)
	if _, err := Parse("k", []byte(b), time.Date(2020, 2, 29, 12, 0, 0, 0, time.UTC)); err != nil {
		t.Errorf("120 years old the day before the birthday: %v", err)
	}
}
