"""Status webhooks: the signed, retried delivery of status events to tenants' callback URLs
(``delivery``), each tenant's cap on attempts in flight (``slots``), the rules that keep a
callback URL from reaching private addresses (``callback_urls``), the bounded DNS lookups of
callback hosts (``host_lookups``) and each tenant's signing secret, stored sealed
(``secrets``). The events themselves are recorded with the status changes
(``service.training.status_events``)."""
