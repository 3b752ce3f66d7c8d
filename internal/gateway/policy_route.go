package gateway

import (
	"fmt"
	"net/http"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// routeRequest finds the model's route (its own, a replica-listed model's,
// else "*") and the route's pool (by length band when it has them).
type routeRequest struct{}

func (routeRequest) apply(x *exchange) *rejection {
	x.route = x.rt.route(x.req.Model)
	if x.route == nil {
		return refuse(http.StatusNotFound, openai.TypeInvalidRequest,
			fmt.Sprintf("The model `%s` does not exist or is not served by this gateway.", x.req.Model), "model", "model_not_found")
	}
	x.pool = x.rt.poolFor(x.route, &x.req)
	return nil
}

// upstreamModel renames the model sent upstream when the route has an
// upstream_model (an alias).
type upstreamModel struct{}

func (upstreamModel) apply(x *exchange) *rejection {
	if m := x.route.upstreamName(x.req.Model); m != x.req.Model {
		x.setField("model", m)
	}
	return nil
}

// upstreamName is the model name the route's pool is sent for a request
// of model: the route's upstream_model when it has one, else model. The
// route's own requests ask it with the client's model, a fallback with the
// route's public name.
func (r *RouteConfig) upstreamName(model string) string {
	if r.UpstreamModel != "" {
		return r.UpstreamModel
	}
	return model
}

// rewriteBody applies the body field changes the policies noted
// (setField), in one pass over the body.
type rewriteBody struct{}

func (rewriteBody) apply(x *exchange) *rejection {
	if len(x.fields) == 0 {
		return nil
	}
	b, err := rewriteFields(x.body, x.fields)
	if err != nil {
		return refuse(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request")
	}
	x.body = b
	return nil
}
