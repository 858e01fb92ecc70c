package backendapi

import (
	"context"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/hoptls"
	"vendorgate/shared/wire"
)

// PostUsage posts one usage flush part (a wire.UsageFlush as JSON) to the
// next backend in turn, outside the lookups' breaker (a usage flush that
// fails is kept and retried by the usage recorder; it must not open the
// breaker of key lookups). nil once the backend took it, applied now or
// before.
func (c *Client) PostUsage(ctx context.Context, body []byte) error {
	hc := c.hosts[int(c.next.Add(1))%len(c.hosts)]
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	scheme := "http://"
	if hc.IsTLS {
		scheme = "https://"
	}
	req.SetRequestURI(scheme + hc.Addr + wire.UsageFlushPath)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set(wire.HeaderInternalToken, c.token)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	timeout := c.timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := hc.DoTimeout(req, resp, timeout); err != nil {
		return fmt.Errorf("post usage to %s: %w", hc.Addr, hoptls.Explain(err))
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		b := resp.Body()
		if len(b) > 200 {
			b = b[:200]
		}
		return fmt.Errorf("post usage to %s: answered %d: %s", hc.Addr, resp.StatusCode(), b)
	}
	return nil
}
