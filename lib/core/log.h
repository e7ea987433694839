// Library logging: silent unless the host installs a callback
// (infer_set_log_callback). Messages below the chosen level are dropped
// before they are formatted.
#pragma once

namespace infer {

enum class LogLevel : int { Debug = 0, Info = 1, Warn = 2, Error = 3 };

using LogFn = void (*)(LogLevel level, const char* message, void* user_data);

void set_log_callback(LogFn fn, void* user_data, LogLevel min_level);
bool log_enabled(LogLevel level);
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace infer
