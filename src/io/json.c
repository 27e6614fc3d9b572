/* JSON objects compared key by key (a resumed run's config against the checkpoint's). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "io.h"

bool mt_json_same(const char *a, const char *b, char *msg, size_t len) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    bool same = x && y;
    const cJSON *kx, *first = NULL;
    cJSON_ArrayForEach(kx, x) {
        const cJSON *ky = cJSON_GetObjectItemCaseSensitive(y, kx->string);
        if (ky && cJSON_Compare(kx, ky, true)) continue;
        if (!first || (cJSON_IsString(kx) && !cJSON_IsString(first))) first = kx;
    }
    if (first) {
        const cJSON *ky = cJSON_GetObjectItemCaseSensitive(y, first->string);
        char *vx = cJSON_PrintUnformatted(first), *vy = ky ? cJSON_PrintUnformatted(ky) : NULL;
        snprintf(msg, len, "%s is %s in the checkpoint, %s now", first->string, vx,
                 vy ? vy : "absent");
        free(vx);
        free(vy);
        same = false;
    }
    if (same && cJSON_GetArraySize(x) != cJSON_GetArraySize(y)) {
        snprintf(msg, len, "the checkpoint has fewer keys");
        same = false;
    }
    cJSON_Delete(x);
    cJSON_Delete(y);
    return same;
}
