-- name: GetOrderAnswer :one
-- Inventory's answer to one order, written in the transaction that claimed the order's
-- event in the inbox and reserved (or did not reserve) its stock.
SELECT order_id, outcome, answered_at FROM order_answers WHERE order_id = $1;

-- name: ListOrderReservations :many
SELECT book_id, quantity FROM reservations WHERE order_id = $1 ORDER BY book_id;
