package stores

import (
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"

	"vendorgate/config"
)

// Check reports the first redis:// URL of o that go-redis cannot parse,
// as New would refuse it; a start and a reload check with it.
func Check(o config.Redis) error {
	_, err := universalOptions(o)
	return err
}

// universalOptions turns redis:// URLs into go-redis options: one URL a
// server, several a Cluster, MasterName a Sentinel set.
func universalOptions(o config.Redis) (*redis.UniversalOptions, error) {
	uo := &redis.UniversalOptions{MasterName: o.MasterName}
	for i, s := range o.URL {
		opt, err := redis.ParseURL(s)
		if err != nil {
			u, _ := url.Parse(s)
			host := ""
			if u != nil {
				host = u.Host
			}
			return nil, fmt.Errorf("redis url %d (%s): %w", i+1, host, err)
		}
		uo.Addrs = append(uo.Addrs, opt.Addr)
		if i == 0 {
			uo.Username, uo.Password, uo.DB, uo.TLSConfig = opt.Username, opt.Password, opt.DB, opt.TLSConfig
		}
	}
	if o.MasterName == "" && len(uo.Addrs) > 1 {
		uo.IsClusterMode = true
	}
	return uo, nil
}
