package billing

import (
	"log/slog"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/request"
	"vendorgate/backend/respond"
	"vendorgate/shared/wire"
)

// FlushHandler answers POST wire.UsageFlushPath (behind the internal-token
// guard): 200 {"applied": true} when the flush was added, false when its id
// was added before; the error envelope for a body that is not a flush.
func (s *Service) FlushHandler(log *slog.Logger) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		var f wire.UsageFlush
		if e := request.Decode(ctx.PostBody(), &f); e != nil {
			respond.Error(ctx, log, e)
			return
		}
		c, cancel := request.Context()
		defer cancel()
		applied, err := s.Ingest(c, f)
		if err != nil {
			respond.Error(ctx, log, err)
			return
		}
		respond.JSON(ctx, fasthttp.StatusOK, map[string]bool{"applied": applied})
	}
}
