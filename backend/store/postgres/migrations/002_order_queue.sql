-- The staff's order list (SearchOrders): every vendor's orders newest
-- first, most often narrowed to one status (the under_review queue).
CREATE INDEX orders_created ON orders (created_at DESC, id DESC);
CREATE INDEX orders_status_created ON orders (status, created_at DESC, id DESC);
