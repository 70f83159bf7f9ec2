/* A public header that breaks the API's vocabulary in known places (check_api_fixture). */
WEFT_API weft_status_t weft_thing(weft_group_t *g, int x);
WEFT_API weft_status_t weft_ithing(weft_group_t *g, int x, weft_req_t **req);
WEFT_API weft_status_t weft_thing_start(weft_group_t *g, int x, weft_req_t **req);
WEFT_API weft_status_t weft_other_start(weft_group_t *g);
WEFT_API weft_status_t weft_lone(weft_group_t *g, weft_req_t **req);
WEFT_API weft_status_t weft_thing_wait(weft_group_t *g);
WEFT_API weft_status_t weft_thing_destroy(weft_group_t *g);
WEFT_API weft_status_t weft_thing_free(weft_group_t *g);
WEFT_API weft_status_t weft_test(weft_req_t *req);
WEFT_API weft_status_t weft_vocab_iembed(weft_group_t *g, weft_req_t **req);
WEFT_API weft_status_t weft_vocab_embed(weft_group_t *g);
