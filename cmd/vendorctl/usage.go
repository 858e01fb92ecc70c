package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"vendorgate/cmd/vendorctl/internal/adminapi"
	"vendorgate/cmd/vendorctl/internal/view"
	"vendorgate/shared/apierr"
)

// maxWindow is the longest window the gateways keep usage for.
const maxWindow = 24 * time.Hour

func usageTop(e *env, inv *invocation) error {
	window, err := windowFlag(inv)
	if err != nil {
		return err
	}
	top := 20
	if s, ok := inv.flags["top"]; ok {
		if top, err = strconv.Atoi(s); err != nil || top < 1 || top > 1000 {
			return usagef(inv.cmd, "--top %q: a whole number from 1 to 1000", s)
		}
	}
	gw, err := e.gatewayAPI()
	if err != nil {
		return err
	}
	q := url.Values{"window": {window}, "top": {strconv.Itoa(top)}}
	raw, err := gw.Do(e.ctx, http.MethodGet, "/usage?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	var u view.UsageTop
	if err := json.Unmarshal(raw, &u); err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	names := map[string]string{}
	for i, r := range u.Vendors {
		if _, ok := names[r.VendorID]; !ok {
			names[r.VendorID], err = e.companyName(r.VendorID)
			var ae *adminapi.Error
			if errors.As(err, &ae) && ae.Detail.Code == apierr.NotFound {
				err = nil // deleted since: its usage still shows, nameless
			}
			if err != nil {
				return err
			}
		}
		u.Vendors[i].CompanyName = names[r.VendorID]
	}
	if u.Vendors == nil {
		u.Vendors = []view.UsageRow{}
	}
	return render(e, u, view.WriteUsageTop)
}

func usageShow(e *env, inv *invocation) error {
	id, err := uuidArg(inv, 0)
	if err != nil {
		return err
	}
	window, err := windowFlag(inv)
	if err != nil {
		return err
	}
	gw, err := e.gatewayAPI()
	if err != nil {
		return err
	}
	// The backend first: an unknown vendor is "no such vendor", not an
	// empty view.
	name, err := e.companyName(id)
	if err != nil {
		return err
	}
	raw, err := gw.Do(e.ctx, http.MethodGet, "/usage/"+url.PathEscape(id)+"?"+url.Values{"window": {window}}.Encode(), nil)
	if err != nil {
		return err
	}
	var u view.VendorUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	u.CompanyName = name
	return render(e, u, view.WriteVendorUsage)
}

// windowFlag checks --window here, so that a window the gateways do not
// keep is a usage error before any call.
func windowFlag(inv *invocation) (string, error) {
	s, ok := inv.flags["window"]
	if !ok {
		return "1h", nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute || d > maxWindow || d%time.Minute != 0 {
		return "", usagef(inv.cmd, "--window %q: whole minutes from 1m to 24h (15m, 1h, 24h)", s)
	}
	return s, nil
}

func (e *env) gatewayAPI() (*adminapi.Client, error) {
	if e.gateway == nil {
		return nil, errors.New("VENDORCTL_GATEWAY_ADMIN_TOKEN is not set: export the gateway's admin token (its admin_token setting)")
	}
	return e.gateway, nil
}

// companyName asks the backend for a vendor's company name.
func (e *env) companyName(id string) (string, error) {
	raw, err := e.api.Do(e.ctx, http.MethodGet, vendorPath(id), nil)
	var ae *adminapi.Error
	if errors.As(err, &ae) && ae.Detail.Code == apierr.NotFound {
		return "", fmt.Errorf("no vendor %s: %w", id, err)
	}
	if err != nil {
		return "", err
	}
	var v view.Vendor
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("read the backend's answer: %w", err)
	}
	return v.CompanyName, nil
}

// render prints v as indented JSON with -o json, else as a table.
func render[T any](e *env, v T, write func(*view.Table, T)) error {
	if e.format == formatJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return view.JSON(e.out, b)
	}
	t := view.NewTable(e.out)
	write(t, v)
	return t.Flush()
}
