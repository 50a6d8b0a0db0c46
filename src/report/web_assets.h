/*
 * web_assets.h - the report page's assets, embedded at build time.
 *
 * web/embed.cmake turns web/report.html, report.css, plot.js and report.js
 * into NUL-terminated byte arrays (generated/web_assets.c in the build
 * folder), so the command needs no files at run time. `_len` is the asset's
 * size in bytes without the final NUL.
 */
#ifndef BS_WEB_ASSETS_H
#define BS_WEB_ASSETS_H

extern const unsigned char bs_web_report_html[];
extern const unsigned long bs_web_report_html_len;
extern const unsigned char bs_web_report_css[];
extern const unsigned long bs_web_report_css_len;
extern const unsigned char bs_web_plot_js[];
extern const unsigned long bs_web_plot_js_len;
extern const unsigned char bs_web_report_js[];
extern const unsigned long bs_web_report_js_len;

#endif
