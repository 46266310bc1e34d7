package api

import (
	"net/http"

	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// listNotifications is GET /notifications?order_id={id}: the order's records in kind
// order, [] when there are none yet, a page at a time (limit, after and the next link of
// httpapi.ParsePage); 400 when order_id is missing or not a UUID.
func listNotifications(svc *notifications.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		orderID, problem := httpapi.QueryUUID(r, "order_id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		page, problem := httpapi.ParsePage[notifications.Kind](r)
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		list, err := svc.ForOrder(r.Context(), orderID, page.After, page.Fetch())
		if err != nil {
			httpapi.Failed(w, r, tel.Logger, "list notifications", err)
			return
		}
		list = httpapi.NextPage(w, r, page, list, func(n notifications.Notification) notifications.Kind { return n.Kind })
		httpapi.WriteJSON(w, http.StatusOK, list)
	}
}
