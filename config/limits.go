package config

import (
	"fmt"
	"time"
)

// Limit is one rate limit: Rate requests per Period with a burst of Burst
// (default Rate). Shadow counts and logs denials but never refuses.
// ShadowTwin, when set, is a second limit evaluated beside this one on its
// own bucket and never enforced: its would-be refusals are counted (the
// usage view, metrics) and logged, so that a tighter limit can be tried on
// live traffic before it is enforced.
type Limit struct {
	Rate       int           `yaml:"rate"`
	Period     time.Duration `yaml:"period"`
	Burst      int           `yaml:"burst"`
	Shadow     bool          `yaml:"shadow"`
	ShadowTwin *Limit        `yaml:"shadow_twin"`
}

// Enabled reports whether l is set.
func (l Limit) Enabled() bool { return l.Rate > 0 }

func (l Limit) validate(name string) error {
	if !l.Enabled() {
		return nil
	}
	if l.Period <= 0 {
		return fmt.Errorf("%s.period must be positive (for example 1m)", name)
	}
	if l.Burst < 0 {
		return fmt.Errorf("%s.burst must not be negative", name)
	}
	if t := l.ShadowTwin; t != nil {
		switch {
		case !t.Enabled():
			return fmt.Errorf("%s.shadow_twin.rate must be positive (or leave shadow_twin out)", name)
		case t.ShadowTwin != nil || t.Shadow:
			return fmt.Errorf("%s.shadow_twin is always shadow and has no twin of its own: remove its shadow and shadow_twin", name)
		}
		return t.validate(name + ".shadow_twin")
	}
	return nil
}

// LimitPair is the reads and orders limits of one scope.
type LimitPair struct {
	Reads  Limit `yaml:"reads"`
	Orders Limit `yaml:"orders"`
}

// Limits are the request limits. Vendor limits are shared by all of a
// vendor's keys and all gateway replicas; per-key limits apply in addition
// when set; Overrides replace a vendor's limits by vendor id.
type Limits struct {
	Vendor    LimitPair            `yaml:"vendor"`
	PerKey    LimitPair            `yaml:"per_key"`
	Overrides map[string]LimitPair `yaml:"overrides"`
}
