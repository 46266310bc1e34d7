package api

import (
	"net/http"

	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// listNotifications is GET /notifications?order_id={id}: the order's records, [] when
// there are none yet; 400 when order_id is missing or not a UUID.
func listNotifications(svc *notifications.Service, tel *telemetry.Telemetry) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		orderID, problem := httpapi.QueryUUID(r, "order_id")
		if problem != nil {
			httpapi.WriteProblem(w, problem)
			return
		}
		list, err := svc.ForOrder(r.Context(), orderID)
		if err != nil {
			tel.Logger.ErrorContext(r.Context(), "list notifications failed", "err", err)
			httpapi.Internal(w)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, list)
	}
}
